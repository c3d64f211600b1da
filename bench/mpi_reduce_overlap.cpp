// The data-parallel reduction as scheduled actions, simulated against a run: under
// `mpirun -np P mpi_reduce_overlap [STEPS]` (P = 2 for the acceptance figure), a P-rank
// pipeline of synthetic stages (1 ms forward, input gradient and weight gradient; 16
// microbatches) over MPI whose executor runs REDUCE_GRAD / WAIT_REDUCE_GRAD
// (ExecutorOptions::reduce_gradients, placed by add_gradient_reduction). Each process's
// reductions run on a link of its own: a worker thread that takes one reduction at a time and
// holds it for a set time per stage (from 2 ms for stage 0 to 8 ms for the last), off the
// rank's compute, as a NIC or a copy engine would. The simulator gets no set time: each
// stage's reduction is first timed alone (REDUCE_GRAD's start to WAIT_REDUCE_GRAD's return,
// the mean of 20) and those measured seconds go in ProfiledCost's StageProfile::
// gradient_reduction. Rank 0 prints, per schedule, the mean measured step, the simulated step
// with the reductions as actions, their ratio, and the step the old model predicts (each
// rank's reductions after its last action, as TransformerCost's step_tail charged them), and
// the measured-over-simulated ratio of the same pipeline without reductions (the executor's
// own overhead, as bench/mpi_overhead.cpp measures it).
//
// With 2 processes a second table runs them as two replicas of a one-rank pipeline (pp 1 ×
// dp 2) whose reductions are real: mpi::Pipeline over mpi::Groups with mpi::GradientReducer's
// MPI_Iallreduce of each stage's 4 MiB of gradients, interleaved 1F1B with 4 stages on the
// rank, so each stage's reduction overlaps the last backwards of the stages below it. Each
// stage's all-reduce is first timed alone through the same reducer (the mean of 20), and the
// table gives the measured step against the simulated one, with the reducer's progress thread
// (mpi::ReducerOptions::progress_thread) and without it.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/pass/reduce_gradients.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/synthetic.hpp"
#include "pipesched/transport/mpi/mpi_groups.hpp"
#include "pipesched/transport/mpi/mpi_pipeline.hpp"

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

constexpr double action_seconds = 1e-3;
constexpr int microbatches = 16;

// The set time of stage `stage`'s reduction: 2 ms for stage 0 up to 8 ms for the last, so the
// last stage, which ends its backward first, has the most to hide in the cooldown, and a
// rank's earlier stage's reduction outlasts the cooldown (only the excess shows).
double link_seconds(int stage, int stages) {
  return stages > 1 ? 2e-3 + 6e-3 * stage / (stages - 1) : 4e-3;
}

// One data-parallel link: reductions queue on it and run one after another on a worker
// thread, each held for its stage's set time; `wait(stage)` returns once that one is done.
class Link {
 public:
  explicit Link(int stages)
      : stages_(stages), done_(static_cast<std::size_t>(stages), 0), worker_([this] { run(); }) {}
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  ~Link() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }

  void start(int stage) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(stage);
      done_[static_cast<std::size_t>(stage)] = 0;
    }
    wake_.notify_all();
  }

  void wait(int stage) {
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [&] { return done_[static_cast<std::size_t>(stage)] != 0; });
  }

  ps::GradientReduction reduction() {
    return {.start = [this](int s) { start(s); }, .wait = [this](int s) { wait(s); }};
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      const int stage = queue_.front();
      queue_.pop_front();
      lock.unlock();
      toy::detail::sleep_from(std::chrono::steady_clock::now(), link_seconds(stage, stages_));
      lock.lock();
      done_[static_cast<std::size_t>(stage)] = 1;
      finished_.notify_all();
    }
  }

  int stages_;
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  std::deque<int> queue_;
  std::vector<char> done_;
  bool stop_ = false;
  std::thread worker_;
};

// Each stage's reduction timed alone on this process's link (every stage, so every process
// learns every stage's figure without a message): the mean of `repeats`.
std::vector<double> measure_reductions(Link& link, int stages, int repeats) {
  std::vector<double> seconds(static_cast<std::size_t>(stages), 0.0);
  for (int s = 0; s < stages; ++s) {
    link.start(s);  // warm up
    link.wait(s);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < repeats; ++i) {
      link.start(s);
      link.wait(s);
    }
    seconds[static_cast<std::size_t>(s)] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / repeats;
  }
  return seconds;
}

template <class Pipe>
double mean_step(Pipe& pipe, const ps::TrainingData<toy::SyntheticStage::tensor_type>& data,
                 int steps) {
  pipe.step(data);  // warm up: connections, allocations, page faults
  double total = 0;
  for (int i = 0; i < steps; ++i)
    total += pipe.step(data).seconds;
  return total / steps;
}

// The step the old model predicts: each rank's reductions one after another after its end.
double reductions_after_the_list(const ps::Schedule& s, const ps::ProfiledCost& cost) {
  const ps::SimulationResult r = ps::simulate(s, cost);
  double step = 0;
  for (int rank = 0; rank < s.rank_count(); ++rank) {
    double end = r.ranks[static_cast<std::size_t>(rank)].end;
    for (int stage : s.placement.stages_of(rank))
      end += cost.stages[static_cast<std::size_t>(stage)].gradient_reduction;
    step = std::max(step, end);
  }
  return step;
}

// A synthetic stage with real weight gradients for the reducer to all-reduce.
struct GradientStage : toy::SyntheticStage {
  GradientStage(const toy::SyntheticCost& cost, int values)
      : toy::SyntheticStage(cost), grads{toy::Tensor<float>({values}, 1.0f)} {}
  std::span<toy::Tensor<float>> parameters() { return weights; }
  std::span<toy::Tensor<float>> gradients() { return grads; }
  std::vector<toy::Tensor<float>> grads, weights = grads;
};

constexpr int gradient_values = 1 << 20;  // 4 MiB of float gradients per stage

// Each stage's all-reduce timed alone through a reducer over `data`: the mean of `repeats`.
std::vector<double> measure_allreduces(MPI_Comm data, std::vector<GradientStage>& stages,
                                       const ps::Schedule& executed, bool progress, int repeats) {
  ps::mpi::ReducerOptions options;
  options.progress_thread = progress;
  ps::mpi::GradientReducer<GradientStage> reducer(data, stages, executed.ranks.front(), {},
                                                  std::chrono::seconds(60), options);
  std::vector<double> seconds(stages.size(), 0.0);
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const int stage = static_cast<int>(s);
    reducer.begin_step();
    reducer.start(stage);  // warm up
    reducer.wait(stage);
    MPI_Barrier(data);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < repeats; ++i) {
      reducer.begin_step();
      reducer.start(stage);
      reducer.wait(stage);
    }
    seconds[s] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / repeats;
  }
  // Every replica takes the slower figure: the all-reduce ends on both together.
  MPI_Allreduce(MPI_IN_PLACE, seconds.data(), static_cast<int>(seconds.size()), MPI_DOUBLE, MPI_MAX,
                data);
  return seconds;
}

// pp 1 × dp 2 with real all-reduces, with and without the reducer's progress thread.
void real_reductions(const toy::SyntheticCost& cost, int steps, int rank) {
  const ps::mpi::Groups groups(ps::ProcessGrid{1, 2, 1});
  const ps::GeneratorInfo& g = ps::find_generator("interleaved-1f1b");
  const ps::Schedule s =
      g.generate({.ranks = 1, .stages = 4, .microbatches = microbatches}, g.default_wgrad);
  const int stages = s.problem.stages;
  const ps::Schedule executed = ps::add_gradient_reduction(ps::lower_communication(s));
  const auto data = toy::synthetic_training_data();
  if (rank == 0)
    std::printf(
        "\npp 1 x dp 2: %s with %d stages on the rank, each stage's %d MiB of gradients "
        "all-reduced by mpi::GradientReducer (MPI_Iallreduce), %d steps each\n\n"
        "%-17s %14s %12s %13s %8s\n",
        s.name.c_str(), stages, gradient_values * 4 >> 20, steps, "progress thread",
        "all-reduce ms", "measured ms", "simulated ms", "ratio");
  for (bool progress : {true, false}) {
    std::vector<GradientStage> models(static_cast<std::size_t>(stages),
                                      GradientStage(cost, gradient_values));
    const std::vector<double> reduce =
        measure_allreduces(groups.data(), models, executed, progress, 20);
    ps::ProfiledCost predicted = toy::synthetic_profiled_cost(cost, stages);
    double mean_reduce = 0;
    for (int st = 0; st < stages; ++st) {
      predicted.stages[static_cast<std::size_t>(st)].gradient_reduction =
          reduce[static_cast<std::size_t>(st)];
      mean_reduce += reduce[static_cast<std::size_t>(st)] / stages;
    }
    const double simulated = ps::simulate(executed, predicted).makespan;
    ps::mpi::ReducerOptions options;
    options.progress_thread = progress;
    ps::mpi::Pipeline<GradientStage> pipe(s, models, groups, {.reducer = options});
    pipe.step(data);  // warm up
    double measured = 0;
    for (int i = 0; i < steps; ++i)
      measured += pipe.step(data).seconds / steps;
    if (rank == 0)
      std::printf("%-17s %14.2f %12.2f %13.2f %8.3f\n", progress ? "yes" : "no", mean_reduce * 1e3,
                  measured * 1e3, simulated * 1e3, measured / simulated);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ps::mpi::Session session(argc, argv);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  if (steps < 1) {
    if (session.rank() == 0)
      std::fprintf(stderr, "usage: mpirun -np P mpi_reduce_overlap [STEPS>=1]\n");
    return 2;
  }
  const int ranks = session.size();
  const toy::SyntheticCost cost{.forward = action_seconds,
                                .backward_input = action_seconds,
                                .backward_weight = action_seconds,
                                .activation_bytes = 1 << 20,
                                .wgrad_bytes = 1 << 19};
  const auto data = toy::synthetic_training_data();
  if (session.rank() == 0)
    std::printf(
        "%d ranks as MPI processes, %d microbatches, 1 ms actions, reductions on a link per "
        "process (2 to 8 ms by stage, measured alone), %d steps each\n\n"
        "%-17s %12s %13s %8s %19s %18s\n",
        ranks, microbatches, steps, "schedule", "measured ms", "simulated ms", "ratio",
        "reduce-after-list ms", "no-reduction ratio");
  try {
    for (const char* name : {"1f1b", "zb-h1", "interleaved-1f1b"}) {
      const ps::GeneratorInfo& g = ps::find_generator(name);
      const ps::Schedule s =
          g.generate({.ranks = ranks, .microbatches = microbatches}, g.default_wgrad);
      const int stages = s.problem.stages;
      Link link(stages);
      const std::vector<double> reduce = measure_reductions(link, stages, 20);
      ps::ProfiledCost predicted = toy::synthetic_profiled_cost(cost, stages);
      for (int st = 0; st < stages; ++st)
        predicted.stages[static_cast<std::size_t>(st)].gradient_reduction =
            reduce[static_cast<std::size_t>(st)];
      // What the executor runs: the lowered schedule with the reductions placed.
      const ps::Schedule executed = ps::add_gradient_reduction(ps::lower_communication(s));
      const double simulated = ps::simulate(executed, predicted).makespan;
      const double after = reductions_after_the_list(s, predicted);
      std::vector<toy::SyntheticStage> models(static_cast<std::size_t>(stages),
                                              toy::SyntheticStage(cost));
      ps::ExecutorOptions options;
      options.reduce_gradients = link.reduction();
      ps::mpi::Pipeline<toy::SyntheticStage> mpi(s, models, MPI_COMM_WORLD, options);
      const double measured = mean_step(mpi, data, steps);
      // The same pipeline without reductions: the executor's own overhead, for comparison.
      ps::mpi::Pipeline<toy::SyntheticStage> bare(s, models, MPI_COMM_WORLD);
      const double bare_ratio = mean_step(bare, data, steps) / ps::simulate(s, predicted).makespan;
      MPI_Barrier(MPI_COMM_WORLD);
      if (session.rank() == 0)
        std::printf("%-17s %12.2f %13.2f %8.3f %19.2f %18.3f\n", name, measured * 1e3,
                    simulated * 1e3, measured / simulated, after * 1e3, bare_ratio);
    }
    if (ranks == 2) real_reductions(cost, steps, session.rank());
  } catch (const ps::peer_lost& e) {
    std::fprintf(stderr, "%s\n", e.what());
    session.abort(1);
  } catch (const ps::error& e) {
    std::fprintf(stderr, "mpi_reduce_overlap: %s\n", e.what());
    return 1;
  }
  return 0;
}
