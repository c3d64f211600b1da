// The step loop of a pipeline whose ranks are processes (mpi::Pipeline, nccl::Pipeline): each
// process runs its rank's Executor over a `process_transport`; every step starts after a
// barrier, ends with an agreement on whether (and which) a rank failed, commits or rolls back
// on every process together, and gathers every rank's figures on every process. Also what
// the pipelines of a job with replicas share: a data-parallel reducer as the pipeline's
// Reduction, and the list a rank runs with the gradient reductions placed.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API is all pipesched uses
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pipesched/exec/detail/commit.hpp"
#include "pipesched/exec/detail/deadline.hpp"
#include "pipesched/exec/errors.hpp"
#include "pipesched/exec/executor.hpp"
#include "pipesched/exec/process_grid.hpp"
#include "pipesched/exec/step_result.hpp"
#include "pipesched/exec/tensor_group.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/pass/reduce_gradients.hpp"
#include "pipesched/transport/detail/poll.hpp"
#include "pipesched/transport/detail/process_transport.hpp"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"
#include "pipesched/transport/mpi/mpi_session.hpp"
#include "pipesched/transport/pipeline_options.hpp"

namespace pipesched {

namespace detail {

// A RankRun as doubles, to gather every rank's measurements on every process.
inline void append(std::vector<double>& out, const RankRun& run) {
  out.insert(out.end(), {double(run.rank), run.loss, run.peak_bytes, run.peak_host_bytes, run.end,
                         double(run.filled), double(run.timing.size()), double(run.memory.size())});
  for (const ActionTiming& t : run.timing)
    out.insert(out.end(), {t.start, t.end});
  for (const MemoryPoint& m : run.memory)
    out.insert(out.end(), {m.time, m.value});
}

inline RankRun read_run(const double*& p) {
  RankRun run;
  run.rank = static_cast<int>(p[0]);
  run.loss = p[1];
  run.peak_bytes = p[2];
  run.peak_host_bytes = p[3];
  run.end = p[4];
  run.filled = static_cast<int>(p[5]);
  const auto timings = static_cast<std::size_t>(p[6]);
  const auto points = static_cast<std::size_t>(p[7]);
  p += 8;
  run.timing.resize(timings);
  for (ActionTiming& t : run.timing) {
    t = {p[0], p[1]};
    p += 2;
  }
  run.memory.resize(points);
  for (MemoryPoint& m : run.memory) {
    m = {p[0], p[1]};
    p += 2;
  }
  return run;
}

// A data-parallel reducer R (mpi::GradientReducer, nccl::GradientReducer) as a process pipeline's
// Reduction (the pipeline's nested interface): its waits run the pipeline's progress, which
// `attach` gives, and with ZeRO its all-gather completes a committed update.
template <class Reduction, class R>
struct ReducerLink final : Reduction {
  template <class... Args>
  explicit ReducerLink(Args&&... args) : reducer(std::forward<Args>(args)...) {
    reducer.set_poll([this] {
      if (poll) poll();
    });
  }
  void attach(std::function<void()> p) override { poll = std::move(p); }
  void begin_step() override { reducer.begin_step(); }
  bool drain(std::chrono::duration<double> timeout) override { return reducer.drain(timeout); }
  void complete_update() override {
    if constexpr (requires { reducer.gather_weights(); })
      if (reducer.steps_weights()) reducer.gather_weights();
  }
  // Makes `options`' REDUCE_GRAD and WAIT_REDUCE_GRAD start and wait for this reducer.
  void connect(ExecutorOptions& options) {
    options.reduce_gradients.start = [this](int stage) { reducer.start(stage); };
    options.reduce_gradients.wait = [this](int stage) { reducer.wait(stage); };
  }
  std::function<void()> poll;
  R reducer;
};

// A reducer that steps the weights (its options' ShardOptimizer, any ZeRO stage), the same on
// every process pipeline: the optimizer hook steps this replica's shards (ZeRO-0: the whole
// buckets), the rollback hook discards that step; the weights are written (ZeRO: all-gathered)
// once the job agreed to commit (ReducerLink::complete_update). `who` names the pipeline,
// `reducer_options` its reducer's options. A template, so that nothing of the reducer is named
// for stages without gradients.
template <class R>
void shard_optimizer(const char* who, const char* reducer_options, ExecutorOptions& options,
                     R& reducer) {
  if (!reducer.steps_weights()) return;
  if (options.optimizer || options.snapshot || options.rollback)
    throw invalid_problem(std::string(who) + ": " + reducer_options +
                          "::optimizer steps the weights (ZeRO-" + std::to_string(reducer.zero()) +
                          "), but ExecutorOptions also has an optimizer, snapshot or rollback "
                          "hook; leave those empty (the reducer keeps and restores the weights "
                          "and the optimizer's state), or leave " +
                          reducer_options + "::optimizer empty with ZeRO-0.");
  options.optimizer = [&reducer](int) { reducer.step_shards(); };
  options.rollback = [&reducer](int) { reducer.discard_step(); };
}

// The list pipeline rank `rank` of a job with replicas runs: `schedule` lowered, with each
// stage's reduction placed (add_gradient_reduction). Refuses options that reduce gradients
// already and a grid whose pipeline is shorter than the schedule (`who` names the pipeline).
inline std::vector<Action> replica_list(const char* who, const Schedule& schedule,
                                        const ExecutorOptions& options, const ProcessGrid& grid,
                                        int rank) {
  if (options.reduce_gradients)
    throw invalid_problem(std::string(who) +
                          ": the options already reduce gradients, and a job with " +
                          std::to_string(grid.data) +
                          " replicas reduces them over its data-parallel group; leave "
                          "ExecutorOptions::reduce_gradients empty.");
  const Schedule executed = add_gradient_reduction(lower_communication(schedule));
  if (rank >= executed.rank_count())
    throw invalid_problem(std::string(who) + ": the schedule has " +
                          std::to_string(executed.rank_count()) + " ranks but the grid has " +
                          grid.describe() +
                          "; give the grid the schedule's rank count as its pipeline.");
  return executed.ranks[static_cast<std::size_t>(rank)];
}

// A pipeline whose ranks are processes: this process runs its rank's Executor over `Transport`
// (mpi::Transport, or nccl::Transport for GPUs) on `Device`; every step starts after a barrier,
// ends with an agreement on whether (and which) a rank failed, and gathers every rank's figures on
// every process. What it needs of the transport is the `process_transport` concept.
template <class Stage, class Transport, class Device>
class ProcessPipeline {
  static_assert(check_process_transport<Transport, MPI_Request>());

 public:
  using tensor_type = typename Stage::tensor_type;

  //! This process's pipeline rank.
  int rank() const noexcept { return transport_.rank(); }
  //! Pipeline ranks (= processes).
  int ranks() const noexcept { return transport_.ranks(); }

  //! Runs one training step: every process must call it. Returns every rank's measurements
  //! (times since a common start taken after a barrier) and the total loss, on every process.
  //! The step commits on every process or on none: the optimizer hooks run once every rank
  //! has finished its list, and when a snapshot or optimizer hook throws, the rollback hook
  //! undoes the update of every rank whose optimizer ran (the error's `rolled_back()`, on
  //! every process).
  StepResult step(const TrainingData<tensor_type>& data) {
    if (broken_)
      throw peer_lost("rank " + std::to_string(rank()) +
                      ": an earlier step lost contact with a peer process; the job cannot run "
                      "more steps (end it with mpi::Session::abort).");
    MPI_Comm comm = job();
    transport_.begin_step();
    if (reduction_) reduction_->begin_step();
    if (tensor_) tensor_->begin_step();
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::check(MPI_Ibarrier(comm, &request), "MPI_Ibarrier");
    if (!transport_.wait(request, deadline()))
      lost("not every process reached the start of the step");
    if constexpr (requires(const Device& d) { d.activate(); }) device_.activate();
    const auto start = device_.mark();

    RankRun run;
    std::optional<FailureNotice> local, heard;
    try {
      run = executor_->step(data, start);
    } catch (const transport_aborted&) {
      // Another rank failed; the agreement below names it.
      heard = transport_.failure();
    } catch (const execution_error& e) {
      local = FailureNotice{e.rank(), e.position(), e.action(), replica_ + e.what()};
    } catch (...) {
      // The executor attaches what a layer or the optimizer throws; anything else still
      // reaches every process, as this rank's failure outside its list.
      local = FailureNotice{
          rank(), -1, Action{},
          replica_ + "rank " + std::to_string(rank()) + ": " + current_exception_text()};
    }
    if (local) transport_.notify_failure(*local);

    // Every process of the job learns whether (and which) a rank failed.
    const int lowest = lowest_where(
        local.has_value(),
        local   ? local->message
        : heard ? "rank " + std::to_string(heard->rank) + " failed (" + heard->message + ")"
                : std::string("the other processes did not finish the step"));
    if (lowest != INT_MAX) fail(lowest, local);
    commit();
    return gather(std::move(run));
  }

  //! The transport (to inspect it in tests).
  Transport& transport() noexcept { return transport_; }

 protected:
  //! Names this process's replica (`index` of `count`) before the failures it reports, so
  //! that an error says which replica's rank failed; nothing with one replica.
  void name_replica(int index, int count) {
    replica_ = count > 1
                   ? "replica " + std::to_string(index) + " of " + std::to_string(count) + ": "
                   : std::string();
  }

 public:
  //! The executed (lowered) schedule.
  const Schedule& schedule() const noexcept { return executor_->schedule(); }

  //! What a process pipeline's data-parallel reduction gives it: a fresh start per step, and
  //! after a failed step the completion of every reduction a replica started (collective over
  //! the data-parallel group; false when it could not within `timeout`).
  struct Reduction {
    virtual ~Reduction() = default;
    //! `poll` runs while a reduction is waited for: it moves the pipeline's messages and
    //! throws transport_aborted once another process failed.
    virtual void attach(std::function<void()> poll) = 0;
    virtual void begin_step() = 0;
    virtual bool drain(std::chrono::duration<double> timeout) = 0;
    //! Once every process's update is applied and none failed: what completes it across
    //! replicas (ZeRO's all-gather of the updated weights; nothing without ZeRO).
    virtual void complete_update() {}
  };

 protected:
  //! Gives the pipeline the tensor-parallel group its stage models sum over (owned): a fresh
  //! start per step, and its collectives completed after a failed step like the reduction's.
  void set_tensor_group(std::unique_ptr<Reduction> group) {
    tensor_ = std::move(group);
    if (tensor_) tensor_->attach(progress("a tensor-parallel all-reduce"));
  }

  //! A job with tp > 1, or stage models built for a tensor shard: every stage this process
  //! holds (pipeline rank `at.pipeline` of `schedule`, in `grid`) must be built for its place
  //! in the tensor group, which is checked on every process of the job together (else
  //! invalid_problem, `who` naming the pipeline); then, when the grid or the stages are split,
  //! `make()` makes the group (a Reduction whose `group` member is the TensorGroup), the
  //! pipeline owns it, and each of those stages is given it (and detached at the end).
  template <class MakeLink>
  void join_tensor_group(const char* who, const Schedule& schedule, std::span<Stage> stages,
                         const ProcessGrid& grid, const ProcessGrid::Coordinates& at,
                         MakeLink&& make) {
    const TensorShard want{at.tensor, grid.tensor};
    std::string wrong;
    bool split = false;
    if constexpr (tensor_parallel_stage<Stage>) {
      for (int s : schedule.placement.stages_of(at.pipeline)) {
        const TensorShard got = stages[static_cast<std::size_t>(s)].tensor_shard();
        split = split || got.split();
        if (got != want && wrong.empty())
          wrong = "stage " + std::to_string(s) + " is built for tensor shard " +
                  std::to_string(got.rank) + " of " + std::to_string(got.size) +
                  " but this process is member " + std::to_string(want.rank) + " of its " +
                  std::to_string(want.size) +
                  "-way tensor group; build each process's stages "
                  "with TensorShard{coordinates().tensor, grid().tensor}";
      }
    } else if (want.split()) {
      wrong = "the grid has tp = " + std::to_string(want.size) +
              " but the stage model takes no tensor group (see tensor_parallel_stage)";
    }
    // Agreed over the job within the receive timeout: a process that never gets here ends
    // the job (peer_lost naming it) rather than leaving the others waiting.
    if (any_process(!wrong.empty(),
                    "not every process of the job reached the check of the stage "
                    "models against the tensor group"))
      throw invalid_problem(std::string(who) + ": " +
                            (wrong.empty() ? std::string("another process's stages do not fit "
                                                         "its place in the tensor group")
                                           : wrong) +
                            ".");
    if constexpr (tensor_parallel_stage<Stage>) {
      if (!want.split() && !split) return;
      auto link = make();
      for (int s : schedule.placement.stages_of(at.pipeline)) {
        Stage& st = stages[static_cast<std::size_t>(s)];
        st.set_tensor_group(&link->group);
        tensor_stages_.push_back(&st);
      }
      set_tensor_group(std::move(link));
    }
  }

 public:
  //! Detaches this process's stage models from the tensor group the pipeline owned.
  ~ProcessPipeline() {
    if constexpr (tensor_parallel_stage<Stage>)
      for (Stage* s : tensor_stages_)
        s->set_tensor_group(nullptr);
  }

 protected:
  //! What a pipeline of a job is built with: its executor options and, with replicas, the
  //! data-parallel reduction whose REDUCE_GRAD and WAIT_REDUCE_GRAD those options call.
  struct Prepared {
    ExecutorOptions options;
    std::unique_ptr<Reduction> reduction;
  };

  //! The data-parallel wiring of a job, the same for every process pipeline: `reducer_options`
  //! checked (named `options_name`); with replicas, or with a reducer that steps the weights
  //! (ReducerOptions::optimizer), this rank's list with each stage's reduction placed
  //! (`replica_list`, refusing options that reduce gradients already and a grid shorter than
  //! the schedule; `who` names the pipeline), a `Reducer` made of `reducer_args...`, that list,
  //! the poll the pipeline attaches later, the receive timeout and `reducer_options`, connected
  //! to the options' REDUCE_GRAD and WAIT_REDUCE_GRAD and, when it steps the weights, to their
  //! optimizer and rollback hooks (`shard_optimizer`). Without either, the options as given.
  template <class Reducer, class... ReducerArgs>
  static Prepared reduce_with(const char* who, const char* options_name, const Schedule& schedule,
                              const ProcessGrid& grid, int pipeline_rank, ExecutorOptions options,
                              const ReducerOptions& reducer_options,
                              ReducerArgs&&... reducer_args) {
    if (!needs_reducer(options_name, grid, reducer_options))
      return Prepared{std::move(options), nullptr};
    using Link = ReducerLink<Reduction, Reducer>;
    auto link =
        std::make_unique<Link>(std::forward<ReducerArgs>(reducer_args)...,
                               replica_list(who, schedule, options, grid, pipeline_rank),
                               std::function<void()>(), options.receive_timeout, reducer_options);
    link->connect(options);
    shard_optimizer(who, options_name, options, link->reducer);
    return Prepared{std::move(options), std::move(link)};
  }

  //! `reduce_with` for a stage model the pipeline's reducer cannot reach: the options as given
  //! when the job needs no reducer, else the error; `lacks` says what the stage model lacks
  //! (and which concept says so).
  static Prepared without_reducer(const char* who, const char* options_name,
                                  const ProcessGrid& grid, ExecutorOptions options,
                                  const ReducerOptions& reducer_options, const std::string& lacks) {
    if (!needs_reducer(options_name, grid, reducer_options))
      return Prepared{std::move(options), nullptr};
    throw not_reducible(who, grid, lacks);
  }

  //! A process's pipeline of a tensor group: the group (mpi::TensorGroup, nccl::TensorGroup) as
  //! the pipeline's collective, made of `args...`, its waits running the pipeline's progress.
  template <class Group>
  struct GroupLink final : Reduction {
    template <class... Args>
    explicit GroupLink(Args&&... args) : group(std::forward<Args>(args)...) {}
    void attach(std::function<void()> p) override { group.set_poll(std::move(p)); }
    void begin_step() override { group.begin_step(); }
    bool drain(std::chrono::duration<double> t) override { return group.drain(t); }
    Group group;
  };

  // Whether a job on `grid` with `reducer_options` (checked here) needs a reducer.
  static bool needs_reducer(const char* options_name, const ProcessGrid& grid,
                            const ReducerOptions& reducer_options) {
    reducer_options.validate(options_name);
    return grid.data > 1 || static_cast<bool>(reducer_options.optimizer);
  }

  // The error for a job with replicas whose stage model the pipeline's reducer cannot reach.
  static invalid_problem not_reducible(const char* who, const ProcessGrid& grid,
                                       const std::string& lacks) {
    return invalid_problem(std::string(who) + ": a job with " + std::to_string(grid.data) +
                           " replicas reduces each stage's gradients over its data-parallel "
                           "group, but the stage model has no " +
                           lacks + ".");
  }

  //! How long a wait lasts before the step fails (ExecutorOptions::receive_timeout).
  std::chrono::duration<double> wait_limit() const noexcept { return timeout_; }

  //! What a wait for a collective runs meanwhile: the pipeline's messages move, and once
  //! another process failed it throws transport_aborted (`what` names the wait).
  std::function<void()> progress(const std::string& what) {
    return [this, what] {
      transport_.progress();
      if (const auto& f = transport_.failure())
        throw transport_aborted("rank " + std::to_string(rank()) + " stopped waiting for " + what +
                                ": rank " + std::to_string(f->rank) + " failed (" + f->message +
                                ")");
    };
  }

  template <class... TransportArgs>
  ProcessPipeline(const char* who, const Schedule& schedule, std::span<Stage> stages, Device device,
                  ExecutorOptions options, TransportArgs&&... transport_args)
      : ProcessPipeline(with_reduction, who, schedule, stages, std::move(device),
                        std::move(options), nullptr,
                        std::forward<TransportArgs>(transport_args)...) {}

  //! As above, with `reduction` (owned) reducing the gradients over the data-parallel group;
  //! `options.reduce_gradients` calls it.
  struct WithReduction {};
  static constexpr WithReduction with_reduction{};
  template <class... TransportArgs>
  ProcessPipeline(WithReduction, const char* who, const Schedule& schedule, std::span<Stage> stages,
                  Device device, ExecutorOptions options, std::unique_ptr<Reduction> reduction,
                  TransportArgs&&... transport_args)
      : transport_(std::forward<TransportArgs>(transport_args)...),
        device_(std::move(device)),
        timeout_(options.receive_timeout),
        reduction_(std::move(reduction)) {
    mpi::check(MPI_Comm_rank(job(), &job_rank_), "MPI_Comm_rank");
    if (reduction_) reduction_->attach(progress("a data-parallel reduction"));
    if (static_cast<int>(stages.size()) != schedule.problem.stages)
      throw invalid_problem(std::string(who) + ": the schedule has " +
                            std::to_string(schedule.problem.stages) + " stages but " +
                            std::to_string(stages.size()) +
                            " stage models were given; pass one per stage (indexed by stage).");
    std::vector<Stage*> mine;
    for (int s : schedule.placement.stages_of(transport_.rank()))
      mine.push_back(&stages[static_cast<std::size_t>(s)]);
    executor_.emplace(schedule, transport_.rank(), std::move(mine), transport_, device_,
                      std::move(options));
  }

 private:
  std::chrono::steady_clock::time_point deadline() const {
    return detail::deadline_after(timeout_);
  }

 protected:
  //! Whether `mine` holds on any process of the job (a maximum over it, every process taking
  //! part), within the receive timeout; a process that does not answer in time ends the
  //! pipeline as `lost` does, `what` naming what was agreed on.
  bool any_process(bool mine, const std::string& what) {
    int in = mine ? 1 : 0, any = 0;
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::check(MPI_Iallreduce(&in, &any, 1, MPI_INT, MPI_MAX, job(), &request), "MPI_Iallreduce");
    if (!transport_.wait(request, deadline())) lost(what);
    return any != 0;
  }

  // A wait over the job ran out: every process that is still running gets here too (each
  // step's agreements span the whole job), so a roll call among them names the processes
  // that went silent, and the error says which.
  [[noreturn]] void lost(const std::string& what) {
    broken_ = true;
    const std::vector<int> silent = roll_call();
    const std::string limit = seconds_text(timeout_.count()) + " s";
    if (silent.empty())
      throw peer_lost("rank " + std::to_string(rank()) + ": " + what +
                      "; no answer from every process within " + limit +
                      ", so a process has died or hangs. End the job (mpi::Session::abort).");
    std::string names;
    for (std::size_t i = 0; i < silent.size(); ++i)
      names += (i == 0 ? "" : i + 1 == silent.size() ? " and " : ", ") + process_name(silent[i]);
    throw peer_lost("rank " + std::to_string(rank()) + ": " + what + "; " + names +
                    " went silent: no answer within " + limit +
                    " (dead, hung or stopped). End the job (mpi::Session::abort).");
  }

  // Process `p` of the job as the errors name it: its pipeline rank when the job is one
  // pipeline, else its place in the job's communicator.
  std::string process_name(int p) const {
    int size = 0;
    MPI_Comm_size(job(), &size);
    if (size == ranks()) return "rank " + std::to_string(p);
    return "process " + std::to_string(p) + " of the job";
  }

 private:
  // Every process that gives up on a wait tells every other that it is still here, and
  // listens for the same from each for up to the receive timeout (the others give up within
  // about that time of one another). Returns the processes not heard from, in order; none
  // without a deadline (a wait without one gives up only when told of a failure, and a roll
  // call must not wait forever).
  std::vector<int> roll_call() {
    static constexpr int here = 1;  // outlives any send still in flight
    const auto deadline = deadline_after(timeout_);
    if (deadline == no_deadline) return {};
    MPI_Comm comm = job();
    int size = 0;
    MPI_Comm_size(comm, &size);
    const auto n = static_cast<std::size_t>(size);
    std::vector<int> heard(n, 0);
    std::vector<char> answered(n, 0);
    std::vector<MPI_Request> answers(n, MPI_REQUEST_NULL);
    answered[static_cast<std::size_t>(job_rank_)] = 1;
    for (int p = 0; p < size; ++p) {
      if (p == job_rank_) continue;
      const auto i = static_cast<std::size_t>(p);
      // MPI may refuse to talk to a process that is gone: that one stays silent.
      if (MPI_Irecv(&heard[i], 1, MPI_INT, p, roll_call_tag, comm, &answers[i]) != MPI_SUCCESS)
        answers[i] = MPI_REQUEST_NULL;
      MPI_Request sent = MPI_REQUEST_NULL;
      if (MPI_Isend(&here, 1, MPI_INT, p, roll_call_tag, comm, &sent) == MPI_SUCCESS &&
          sent != MPI_REQUEST_NULL)
        MPI_Request_free(&sent);
    }
    std::vector<int> silent;
    poll_until({"the roll call", deadline, poll_interval::roll_call}, [&] {
      silent.clear();
      for (int p = 0; p < size; ++p) {
        const auto i = static_cast<std::size_t>(p);
        if (answered[i]) continue;
        int done = 0;
        if (answers[i] != MPI_REQUEST_NULL &&
            MPI_Test(&answers[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
          answered[i] = 1;
        else
          silent.push_back(p);
      }
      return silent.empty();
    });
    for (int p : silent) {  // the answer that never came
      MPI_Request& r = answers[static_cast<std::size_t>(p)];
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    return silent;
  }

  // The tag of the roll call's messages over job() (the failure notices use tag 0).
  static constexpr int roll_call_tag = 1;

  // The communicator of the whole job: the step's barrier, agreements and notices go over it.
  MPI_Comm job() const {
    if constexpr (requires(const Transport& t) { t.job(); })
      return transport_.job();
    else
      return transport_.communicator();
  }

  // The process `who` of the job failed in its list: every process gets its notice, the
  // messages and reductions still in flight are completed and dropped, and the failure is
  // thrown here as that rank's execution_error (no rank has applied its update: the step is
  // rolled back).
  [[noreturn]] void fail(int who, const std::optional<FailureNotice>& local) {
    const FailureNotice notice = notice_of(who, local);
    if (!transport_.drain(timeout_)) lost(notice.message);
    if (reduction_ && !reduction_->drain(timeout_)) lost(notice.message);
    if (tensor_ && !tensor_->drain(timeout_)) lost(notice.message);
    throw rolled_back(execution_error(notice.message, notice.rank, notice.position, notice.action));
  }

  // The notice of process `who` of the job (`local` on that process), on every process.
  FailureNotice notice_of(int who, const std::optional<FailureNotice>& local) {
    mpi::NoticeWire wire;
    if (who == job_rank_) wire = mpi::encode(*local);
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::check(MPI_Ibcast(&wire, sizeof wire, MPI_BYTE, who, job(), &request), "MPI_Ibcast");
    if (!transport_.wait(request, deadline())) lost("rank " + std::to_string(who) + " failed");
    return mpi::decode(wire);
  }

  // The lowest process of the job for which `mine` holds (INT_MAX for none), agreed by every
  // process; `what` says what was agreed on when a process does not answer.
  int lowest_where(bool mine, const std::string& what) {
    int in = mine ? job_rank_ : INT_MAX, lowest = INT_MAX;
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::check(MPI_Iallreduce(&in, &lowest, 1, MPI_INT, MPI_MIN, job(), &request),
               "MPI_Iallreduce");
    if (!transport_.wait(request, deadline())) lost(what);
    return lowest;
  }

  // Every list ran: every process applies its update; when one fails anywhere, every
  // process whose optimizer ran undoes its own (one whose snapshot threw changed nothing, and
  // its rollback would restore an older snapshot), and all throw the failing rank's error.
  void commit() {
    if (!executor_->has_update()) return;
    std::optional<FailureNotice> local;
    try {
      executor_->apply_update();
    } catch (const execution_error& e) {
      local = FailureNotice{e.rank(), e.position(), e.action(), replica_ + e.what()};
    }
    const int who = lowest_where(local.has_value(), "applying the step's updates stalled");
    if (who == INT_MAX) {
      if (reduction_) complete(*reduction_);
      return;
    }
    std::string why;
    bool undone = true;  // nothing to undo where the optimizer did not run
    if (executor_->optimizer_ran()) {
      if (!executor_->can_roll_back()) {
        undone = false;
        why = no_rollback_hook;
      } else {
        try {
          executor_->roll_back_update();
        } catch (const execution_error& e) {
          undone = false;
          why = e.what();
        }
      }
    }
    // Every process learns whether every process undid its update, and the first that did not.
    const int stuck = lowest_where(!undone, "rolling back the step's updates stalled");
    std::optional<FailureNotice> mine;
    if (stuck == job_rank_) mine = FailureNotice{rank(), -1, Action{}, why};
    if (stuck != INT_MAX) why = notice_of(stuck, mine).message;
    const FailureNotice notice = notice_of(who, local);
    throw update_failed(
        execution_error(notice.message, notice.rank, notice.position, notice.action),
        stuck == INT_MAX, why);
  }

  // The committed update's last collective (ZeRO's all-gather); a process that stops
  // answering in it ends the job.
  void complete(Reduction& r) {
    try {
      r.complete_update();
    } catch (const receive_timeout& e) {
      lost(e.what());
    } catch (const transport_aborted& e) {
      lost(e.what());
    }
  }

  StepResult gather(RankRun run) {
    MPI_Comm comm = transport_.communicator();
    std::vector<double> mine;
    append(mine, run);
    int count = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(ranks()));
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::check(MPI_Iallgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm, &request),
               "MPI_Iallgather");
    if (!transport_.wait(request, deadline())) lost("gathering the step's measurements stalled");
    std::vector<int> offsets(counts.size(), 0);
    for (std::size_t i = 1; i < counts.size(); ++i)
      offsets[i] = offsets[i - 1] + counts[i - 1];
    std::vector<double> all(static_cast<std::size_t>(offsets.back() + counts.back()));
    mpi::check(MPI_Iallgatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(),
                               offsets.data(), MPI_DOUBLE, comm, &request),
               "MPI_Iallgatherv");
    if (!transport_.wait(request, deadline())) lost("gathering the step's measurements stalled");
    std::vector<RankRun> runs;
    const double* p = all.data();
    for (int r = 0; r < ranks(); ++r)
      runs.push_back(read_run(p));
    return StepResult::from_runs(std::move(runs), executor_->schedule());
  }

  Transport transport_;
  Device device_;
  std::optional<Executor<Stage, Transport, Device>> executor_;
  std::chrono::duration<double> timeout_;
  std::unique_ptr<Reduction> reduction_;  // the data-parallel one, when the job has replicas
  std::unique_ptr<Reduction> tensor_;     // the tensor-parallel group, when stages use one
  std::vector<Stage*> tensor_stages_;     // given the tensor group; detached at the end
  std::string replica_;  // "replica j of d: " before this process's failures, with replicas
  int job_rank_ = 0;     // this process in job()
  bool broken_ = false;
};

}  // namespace detail

}  // namespace pipesched
