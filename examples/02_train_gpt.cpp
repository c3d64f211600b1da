// A small trainer: the toy GPT through any built-in schedule, optionally with Mario's
// checkpointing under a memory budget and sequence slices, on threads (--transport inproc,
// the default) or on MPI processes (--transport mpi, started as `mpirun -np P`). Every step
// is checked against the sequential (unpipelined) reference; rank 0 prints the summary.
//
// With --vocab-parallel the LM head and loss, and the input embedding's token table, are split
// by vocabulary over the ranks (vocabulary parallelism): the last stage ends at the final
// LayerNorm, the first stage's embedding adds positions to the shards' summed lookups, each rank
// holds a shard of the head (toy::GptVocabularyShard) and of the table (toy::GptInputShard),
// and the schedule's VOCAB_F / VOCAB_B / EMBED_F / EMBED_B passes run them.
//
// With --data-parallel D the MPI job runs D replicas of the pipeline, each on its share of the
// global batch, their gradients averaged by the schedule's REDUCE_GRAD actions.
//
// With --plan FILE it runs a plan of `pipesched tune --json` over MPI (mpi::PlanRun): the plan's
// model as the toy GPT (its layers and their split over the stages, width, heads, MLP width,
// sequence and vocabulary), grid (pp × dp × tp: the blocks split over each tensor group),
// schedule, microbatches and microbatch size, and ZeRO when the plan shards. A plan made from a
// layer profile of this machine (pipesched profile, tune --profile) predicts its step here, and
// the example prints the prediction beside the measured step. A plan with the head split by
// vocabulary (tune --vocab-parallel) runs its passes with the shards, as --vocab-parallel does.
//
//   example_02_train_gpt --schedule zb-h1 --ranks 4 --microbatches 8
//   mpirun -np 4 example_02_train_gpt --transport mpi --schedule slice-pipe --slices 4
//   example_02_train_gpt --schedule zb-v --vocab-parallel
//   mpirun -np 4 example_02_train_gpt --transport mpi --data-parallel 2 --schedule zb-h1
//   pipesched profile --layers 8 --hidden 16 --heads 2 --vocabulary 32 --sequence 16
//       -o prof.json
//   pipesched tune --gpus 4 --pp 2 --zero 1 --profile prof.json --device h100
//       --global-batch 16 --json > plan.json
//   mpirun -np 4 example_02_train_gpt --plan plan.json
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "pipesched/pass/mario.hpp"
#include "pipesched/pass/vocabulary.hpp"
#include "pipesched/pipesched.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/layer_profile.hpp"
#include "pipesched/toy/profile.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#if PIPESCHED_WITH_MPI
#include "pipesched/transport/mpi/mpi_pipeline.hpp"
#include "pipesched/transport/mpi/mpi_plan.hpp"
#endif

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

struct Options {
  std::string transport = "inproc";
  std::string schedule = "1f1b";
  std::string checkpoint = "none";
  int ranks = 4;
  bool ranks_given = false;
  int microbatches = 8;
  int slices = 1;
  int steps = 3;
  int data = 1;                    // data-parallel replicas (MPI)
  bool vocabulary = false;         // --vocab-parallel: the head split over the ranks
  std::string plan;                // --plan FILE: run that plan (MPI)
  std::vector<std::string> given;  // the options given, to refuse those a plan fixes
};

bool quiet = false;  // ranks other than 0 print only errors

void say(const char* format, ...) {
  if (quiet) return;
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
}

int usage(int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: example_02_train_gpt [--transport inproc|mpi] [--schedule NAME]\n"
               "                            [--ranks P] [--microbatches M] [--slices K]\n"
               "                            [--checkpoint none|mario] [--steps N]\n"
               "                            [--data-parallel D] [--vocab-parallel]\n"
               "       mpirun -np N example_02_train_gpt --plan FILE [--steps N]\n"
               "\n"
               "Trains a tiny GPT for N steps (default 3) through schedule NAME (default 1f1b;\n"
               "`pipesched list` names them) on P ranks (default 4) with M microbatches\n"
               "(default 8) cut into K sequence slices (default 1; slice-level schedules), and\n"
               "checks every step's loss and gradients against the sequential reference.\n"
               "--checkpoint mario adds Mario's checkpointing under half of the plan's peak.\n"
               "--vocab-parallel splits the LM head and loss and the input embedding's token\n"
               "table by vocabulary over the ranks: the last stage ends at the final LayerNorm,\n"
               "the first stage's embedding adds positions to the summed lookups, rank j holds\n"
               "rows j of the head and of the table, and the schedule gets a VOCAB_F, VOCAB_B,\n"
               "EMBED_F and EMBED_B per rank and microbatch (add_vocabulary_passes); one\n"
               "replica (not chimera, not --data-parallel).\n"
               "--transport mpi runs one rank per MPI process: start it with\n"
               "`mpirun -np P example_02_train_gpt --transport mpi ...` (P from mpirun).\n"
               "--data-parallel D (with --transport mpi) runs D replicas of a pipeline of\n"
               "P / D ranks, each on M microbatches of a global batch of D x M; their\n"
               "gradients are averaged by REDUCE_GRAD actions after each stage's last weight\n"
               "gradient, and the reference trains on the whole global batch.\n"
               "--plan FILE runs a plan of `pipesched tune --json` (FILE: its output or one\n"
               "plan) over MPI, started as `mpirun -np pp*dp*tp`: its grid, schedule,\n"
               "microbatches, microbatch size and ZeRO stage (SGD on each replica's shard),\n"
               "checked against the sequential reference on the global batch. The toy GPT is\n"
               "the plan's model (layers and their split, width, heads, MLP width, sequence,\n"
               "vocabulary; a plan without a model: one block per stage, width 16); a model\n"
               "the toy cannot be (gated MLP, grouped-query attention, tied embeddings), one\n"
               "this machine cannot hold, more than 4096 sequences per step or more than 4096\n"
               "stages is refused with the reason. A plan made from a layer profile (tune\n"
               "--profile) predicts the step on this machine: the prediction is printed beside\n"
               "the measured step. With tp > 1 each block's heads and MLP split over the tensor\n"
               "group; sequence parallelism is not in the toy (such plans run without it).\n"
               "A plan with vocabulary_passes (tune --vocab-parallel) splits the head over the\n"
               "pipeline ranks as --vocab-parallel does; each shard's gradient is averaged\n"
               "over the data-parallel group and stepped with SGD after each step.\n"
               "Chimera (--schedule chimera, or such a plan) holds two replicas of the model in\n"
               "one pipeline: each block's two copies take the SGD steps of their own\n"
               "microbatches, then add them up (SGD is linear: the step of the summed\n"
               "gradient), so the copies stay equal.\n");
  return code;
}

bool parse(int argc, char** argv, Options& o, int& code) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      code = usage(0);
      return false;
    }
    if (a == "--vocab-parallel") {
      o.vocabulary = true;
      o.given.push_back(a);
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "example_02_train_gpt: %s needs a value\n", a.c_str());
      code = usage(2);
      return false;
    }
    const std::string v = argv[++i];
    o.given.push_back(a);
    if (a == "--transport" || a == "--schedule" || a == "--checkpoint" || a == "--plan") {
      (a == "--transport"  ? o.transport
       : a == "--schedule" ? o.schedule
       : a == "--plan"     ? o.plan
                           : o.checkpoint) = v;
      continue;
    }
    int* target = a == "--ranks"           ? &o.ranks
                  : a == "--microbatches"  ? &o.microbatches
                  : a == "--slices"        ? &o.slices
                  : a == "--steps"         ? &o.steps
                  : a == "--data-parallel" ? &o.data
                                           : nullptr;
    if (!target) {
      std::fprintf(stderr, "example_02_train_gpt: unknown option '%s'\n", a.c_str());
      code = usage(2);
      return false;
    }
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 1 || n > 256) {
      std::fprintf(stderr,
                   "example_02_train_gpt: %s needs a whole number from 1 to 256, got '%s'\n",
                   a.c_str(), v.c_str());
      code = 2;
      return false;
    }
    *target = static_cast<int>(n);
    o.ranks_given |= a == "--ranks";
  }
  if (!o.plan.empty()) {
    for (const std::string& a : o.given)
      if (a != "--plan" && a != "--steps" && !(a == "--transport" && o.transport == "mpi")) {
        std::fprintf(stderr,
                     "example_02_train_gpt: %s cannot go with --plan, which gives the schedule, "
                     "the ranks, the replicas and the transport (mpi); only --steps can\n",
                     a.c_str());
        code = 2;
        return false;
      }
    o.transport = "mpi";
  }
  if (o.transport != "inproc" && o.transport != "mpi") {
    std::fprintf(stderr, "example_02_train_gpt: --transport is inproc or mpi, got '%s'\n",
                 o.transport.c_str());
    code = 2;
    return false;
  }
  if (o.data > 1 && o.transport != "mpi") {
    std::fprintf(stderr,
                 "example_02_train_gpt: --data-parallel %d needs --transport mpi (one process "
                 "per rank of each replica)\n",
                 o.data);
    code = 2;
    return false;
  }
  if (o.vocabulary && o.data > 1) {
    std::fprintf(stderr,
                 "example_02_train_gpt: --vocab-parallel splits the head over one pipeline's "
                 "ranks; it cannot go with --data-parallel %d (the shards' gradients would need "
                 "a reduction of their own)\n",
                 o.data);
    code = 2;
    return false;
  }
  if (o.checkpoint != "none" && o.checkpoint != "mario") {
    std::fprintf(stderr, "example_02_train_gpt: --checkpoint is none or mario, got '%s'\n",
                 o.checkpoint.c_str());
    code = 2;
    return false;
  }
  return true;
}

using Stage = toy::GptStage<double>;
using Shard = toy::GptVocabularyShard<double>;
using InputShard = toy::GptInputShard<double>;

// The vocabulary layers split over the ranks: shard r of the head (and of the token table,
// when the input embedding is split too) on rank r.
struct Vocabulary {
  std::vector<Shard> heads;
  std::vector<InputShard> inputs;  // empty: the embedding stays on the first stage

  Vocabulary(const toy::GptConfig& config, int ranks, bool input) {
    for (int j = 0; j < ranks; ++j) {
      heads.emplace_back(config, j, ranks);
      if (input) inputs.emplace_back(config, j, ranks);
    }
  }
  // Rank r's shards' weights, one vector each (the head's, then the table's).
  std::vector<std::vector<double>*> weights(int r) {
    std::vector<std::vector<double>*> out{&heads[static_cast<std::size_t>(r)].parameters()[0].data};
    if (!inputs.empty()) out.push_back(&inputs[static_cast<std::size_t>(r)].parameters()[0].data);
    return out;
  }
  // Rank r's shards' gradients, in the order of `weights`.
  std::vector<const std::vector<double>*> gradients(int r) const {
    std::vector<const std::vector<double>*> out{
        &heads[static_cast<std::size_t>(r)].gradients()[0].data};
    if (!inputs.empty()) out.push_back(&inputs[static_cast<std::size_t>(r)].gradients()[0].data);
    return out;
  }
  // The executor's hooks and the cost with the shards' figures.
  ps::VocabularyPasses<toy::Tensor<double>> passes(const toy::StepData<double>& data, int slices) {
    return inputs.empty()
               ? toy::vocabulary_passes(std::span(heads), data, slices)
               : toy::vocabulary_passes(std::span(heads), std::span(inputs), data, slices);
  }
  ps::ProfiledCost cost(const std::vector<Stage>& stages, int slices,
                        const toy::GptConfig& config) const {
    const ps::ProfiledCost c = toy::gpt_profiled_cost(stages, slices);
    return inputs.empty() ? toy::with_vocabulary_shards(c, heads, config)
                          : toy::with_vocabulary_shards(c, heads, inputs, config);
  }
};

// SGD on rank r's shards beside its stages (what use_sgd set), with their snapshot and rollback.
void add_shard_sgd(ps::ExecutorOptions& options, Vocabulary& vocabulary) {
  auto saved =
      std::make_shared<std::vector<std::vector<std::vector<double>>>>(vocabulary.heads.size());
  options.optimizer = [step = options.optimizer, &vocabulary](int r) {
    step(r);
    const auto g = vocabulary.gradients(r);
    const auto w = vocabulary.weights(r);
    for (std::size_t t = 0; t < w.size(); ++t)
      for (std::size_t i = 0; i < w[t]->size(); ++i)
        (*w[t])[i] -= 0.1 * (*g[t])[i];
  };
  options.snapshot = [take = options.snapshot, &vocabulary, saved](int r) {
    take(r);
    auto& keep = (*saved)[static_cast<std::size_t>(r)];
    keep.clear();
    for (const std::vector<double>* w : vocabulary.weights(r))
      keep.push_back(*w);
  };
  options.rollback = [put = options.rollback, &vocabulary, saved](int r) {
    put(r);
    const auto w = vocabulary.weights(r);
    for (std::size_t t = 0; t < w.size(); ++t)
      *w[t] = (*saved)[static_cast<std::size_t>(r)][t];
  };
}

// How this process takes part in a step of the global batch: its replica, the replica count,
// and the mean over replicas of a per-replica figure (the identity with one replica).
struct Replica {
  int index = 0;
  int count = 1;
  std::function<double(double)> mean = [](double x) { return x; };
};

#if PIPESCHED_WITH_MPI
// This process's replica of `groups`' job; the mean is over its data-parallel group.
Replica replica_of(const ps::mpi::Groups& groups) {
  const int count = groups.grid().data;
  return {groups.coordinates().data, count, [comm = groups.data(), count](double x) {
            double sum = 0;
            MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, comm);
            return sum / count;
          }};
}
#endif

// Chimera's update of a pipeline with several model replicas (Problem::replicas): every copy
// of a model stage takes the SGD step of its own microbatches' gradient (the executor's
// optimizer, or ZeRO's shard optimizer), and SGD is linear, so adding up the copies' steps
// gives the step of the summed gradient, the update Chimera takes. `before` keeps the weights
// of the stages this process holds; `after` adds every copy's step to them (`sum` adds the
// buffer over the processes of the pipeline; nothing to do on threads), so the copies stay
// equal. Nothing with one replica.
class ReplicaUpdate {
 public:
  ReplicaUpdate(const ps::Problem& problem, std::vector<Stage>& stages, std::vector<int> held,
                std::function<void(std::vector<double>&)> sum = {})
      : problem_(problem), stages_(stages), held_(std::move(held)), sum_(std::move(sum)) {
    if (problem_.replicas == 1) return;
    offset_.assign(static_cast<std::size_t>(problem_.replica_stages()) + 1, 0);
    for (int m = 0; m < problem_.replica_stages(); ++m)
      offset_[m + 1] = offset_[m] + toy::flat_parameters(std::vector{stages_[m]}).size();
  }

  void before() {
    if (problem_.replicas == 1) return;
    saved_.clear();
    for (int st : held_)
      saved_.push_back(toy::flat_parameters(std::vector{stages_[st]}));
  }

  void after() {
    if (problem_.replicas == 1) return;
    std::vector<double> steps(offset_.back(), 0.0);
    for (std::size_t h = 0; h < held_.size(); ++h) {
      const std::vector<double> now = toy::flat_parameters(std::vector{stages_[held_[h]]});
      std::size_t at = offset_[problem_.model_stage(held_[h])];
      for (std::size_t k = 0; k < now.size(); ++k)
        steps[at + k] += now[k] - saved_[h][k];
    }
    if (sum_) sum_(steps);
    for (std::size_t h = 0; h < held_.size(); ++h) {
      std::size_t at = offset_[problem_.model_stage(held_[h])], k = 0;
      for (auto&& p : stages_[held_[h]].parameters())
        for (double& v : p.data) {
          v = saved_[h][k] + steps[at + k];
          ++k;
        }
    }
  }

 private:
  const ps::Problem& problem_;
  std::vector<Stage>& stages_;
  std::vector<int> held_;
  std::function<void(std::vector<double>&)> sum_;
  std::vector<std::size_t> offset_;         // of each model stage's weights in the buffer
  std::vector<std::vector<double>> saved_;  // the held stages' weights before the step
};

// The stages `process_rank` runs (every stage when it is -1: one process runs them all).
std::vector<int> held_stages(const ps::Schedule& s, int process_rank) {
  std::vector<int> out;
  for (int st = 0; st < s.problem.stages; ++st)
    if (process_rank < 0 || s.placement.rank_of(st) == process_rank) out.push_back(st);
  return out;
}

// The toy GPT's stages for schedule `s`: stage st computes model stage
// s.problem.model_stage(st) of the model's replica_stages() (Chimera's two replicas start
// from equal weights), each built for `shard`.
std::vector<Stage> make_stages(const toy::GptConfig& config, const ps::Schedule& s,
                               ps::TensorShard shard = {}) {
  std::vector<Stage> stages;
  for (int st = 0; st < s.problem.stages; ++st)
    stages.emplace_back(config, s.problem.model_stage(st), s.problem.replica_stages(), shard);
  return stages;
}

#if PIPESCHED_WITH_MPI
// The sum over the processes of `comm` (a pipeline), for ReplicaUpdate.
std::function<void(std::vector<double>&)> sum_over(MPI_Comm comm) {
  return [comm](std::vector<double>& v) {
    MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, comm);
  };
}
#endif

// Replica `r`'s share of the global batch `global`: its `global.microbatches / r.count`.
toy::StepData<double> share(const toy::StepData<double>& global, const Replica& r) {
  toy::StepData<double> mine = global;
  const int m = global.microbatches / r.count;
  mine.microbatches = m;
  mine.inputs.assign(global.inputs.begin() + r.index * m,
                     global.inputs.begin() + (r.index + 1) * m);
  mine.targets.assign(global.targets.begin() + r.index * m,
                      global.targets.begin() + (r.index + 1) * m);
  return mine;
}

// Trains through `pipe` (an inproc::Pipeline or an mpi::Pipeline; `process_rank` is the rank this
// process runs, -1 when it runs all of them) on `replica`'s share of the global batch; returns
// mismatches.
template <class Pipe>
int train(Pipe& pipe, const ps::Schedule& s, std::vector<Stage>& stages,
          const toy::GptConfig& config, const Options& o, int process_rank, ReplicaUpdate& update,
          const Replica& replica = {}, ps::TensorShard shard = {},
          std::vector<double>* seconds = nullptr, Vocabulary* vocabulary = nullptr,
          const std::function<void()>& after_step = {}) {
  const auto global = toy::make_gpt_data<double>(config, o.microbatches * replica.count, 7);
  const auto data = share(global, replica);
  auto training = toy::training_data(data, s.problem.slices);  // refers to `data`
  if (vocabulary) training.vocabulary = vocabulary->passes(data, s.problem.slices);
  const ps::SimulationResult predicted =
      ps::simulate(s, vocabulary ? vocabulary->cost(stages, s.problem.slices, config)
                                 : toy::gpt_profiled_cost(stages, s.problem.slices));
  std::vector<Stage> ref;  // the model: one replica's stages
  for (int m = 0; m < s.problem.replica_stages(); ++m)
    ref.emplace_back(config, m, s.problem.replica_stages());
  int failures = 0;
  for (int step = 0; step < o.steps; ++step) {
    const double want = toy::sequential_step(ref, global);
    toy::sgd_update(ref, 0.1);
    update.before();
    const ps::StepResult r = pipe.step(training);
    update.after();
    if (after_step) after_step();
    const double loss = replica.mean(r.loss);
    const bool same = std::abs(loss - want) <= 1e-12 * std::abs(want);
    failures += !same;
    say("step %d: loss %.9f (sequential reference %.9f%s), %.2f ms\n", step, loss, want,
        same ? "" : ", MISMATCH", 1e3 * r.seconds);
    if (seconds) seconds->push_back(r.seconds);
    if (step + 1 == o.steps) {
      say("peak activation KiB per rank, measured / simulated%s:",
          shard.split() ? " (whole blocks: the simulation's figures)" : "");
      for (int k = 0; k < s.rank_count(); ++k)
        say("  r%d %.1f/%.1f", k, r.ranks[k].peak_bytes / 1024,
            predicted.ranks[k].peak_memory / 1024);
      say("\n");
    }
  }
  // This process's stages (its tensor shard of them) against the reference's, after the last
  // update.
  std::vector<Stage> mine;
  std::vector<double> theirs;
  for (int st : held_stages(s, process_rank)) {
    mine.push_back(stages[st]);
    std::vector<double> cut = ref[s.problem.model_stage(st)].flat_shard(shard, false);
    const auto table = static_cast<std::ptrdiff_t>(config.vocabulary) * config.hidden;
    // With the head split, the last stage holds the final LayerNorm without the head's W; with
    // the embedding split, the first holds the position table without the token table.
    if (vocabulary && st == s.problem.stages - 1) cut.resize(cut.size() - std::size_t(table));
    if (vocabulary && !vocabulary->inputs.empty() && st == 0)
      cut.erase(cut.begin(), cut.begin() + table);
    theirs.insert(theirs.end(), cut.begin(), cut.end());
  }
  std::vector<double> got = toy::flat_parameters(mine);
  if (vocabulary) {  // this process's shards against their rows of the reference's tables
    const auto head = ref.back().parameters();
    const std::vector<double>& w = head[head.size() - 1].data;
    const std::vector<double>& e = ref.front().parameters()[0].data;  // the token table
    auto rows_of = [&](const std::vector<double>& from, toy::VocabularyRows rows,
                       const std::vector<double>& p) {
      got.insert(got.end(), p.begin(), p.end());
      theirs.insert(theirs.end(), from.begin() + rows.first * config.hidden,
                    from.begin() + (rows.first + rows.size) * config.hidden);
    };
    for (int j = 0; j < s.rank_count(); ++j) {
      if (process_rank >= 0 && j != process_rank) continue;
      const Shard& sh = vocabulary->heads[static_cast<std::size_t>(j)];
      rows_of(w, sh.rows(), sh.parameters()[0].data);
      if (vocabulary->inputs.empty()) continue;
      const InputShard& in = vocabulary->inputs[static_cast<std::size_t>(j)];
      rows_of(e, in.rows(), in.parameters()[0].data);
    }
  }
  const double err = toy::max_relative_error(got, theirs);
  if (!(err <= 1e-12)) {
    std::printf("parameters differ from the reference by %.3g (relative)\n", err);
    ++failures;
  }
  return failures;
}

int run(const Options& o, int process_rank) {
  const ps::GeneratorInfo& g = ps::find_generator(o.schedule);
  ps::Schedule s = g.generate(
      {.ranks = o.ranks, .microbatches = o.microbatches, .slices = o.slices}, g.default_wgrad);
  const toy::GptConfig config{.vocabulary = 32,
                              .hidden = 16,
                              .heads = 2,
                              .ffn = 32,
                              .sequence = 16,
                              .blocks = s.problem.replica_stages(),
                              .microbatch_size = 2,
                              .seed = 42};
  toy::GptConfig split = config;
  split.split_output = split.split_input = o.vocabulary;
  std::vector<Stage> stages = make_stages(split, s);
  if (o.checkpoint == "mario") {
    const ps::ProfiledCost cost = toy::gpt_profiled_cost(stages, s.problem.slices);
    const double budget = 0.5 * ps::simulate(s, cost).peak_memory_max;
    s = ps::checkpoint_mario(s, cost, ps::MemoryBudget{.all = budget});
  }
  // Both vocabulary layers split, as the paper splits them.
  Vocabulary shards(config, o.vocabulary ? s.rank_count() : 0, true);
  if (o.vocabulary) s = ps::add_vocabulary_passes(s, shards.cost(stages, s.problem.slices, config));
  say("%s on %d ranks (%s), %d microbatches x %d slices, toy GPT with %d blocks%s%s\n",
      s.name.c_str(), s.rank_count(), o.transport == "mpi" ? "MPI processes" : "threads",
      o.microbatches, s.problem.slices, config.blocks,
      o.checkpoint == "mario" ? ", Mario checkpointing" : "",
      o.vocabulary ? ", the head and the token table split by vocabulary over the ranks" : "");
  if (s.problem.replicas > 1)
    say("%d replicas of the model in the pipeline (Chimera): each block's copies add up their "
        "SGD steps after each step\n",
        s.problem.replicas);
  if (o.data > 1)
    say("%d data-parallel replicas, gradients averaged by REDUCE_GRAD actions; global batch %d "
        "microbatches\n",
        o.data, o.data * o.microbatches);
  ps::ExecutorOptions options;
  toy::use_sgd(options, s.placement, stages, 0.1);  // SGD, with its snapshot and rollback
  if (o.vocabulary) add_shard_sgd(options, shards);
  Vocabulary* vocabulary = o.vocabulary ? &shards : nullptr;
  if (process_rank < 0) {
    ps::inproc::Pipeline<Stage> pipe(s, stages, options);
    ReplicaUpdate update(s.problem, stages, held_stages(s, -1));
    return train(pipe, s, stages, config, o, process_rank, update, {}, {}, nullptr, vocabulary);
  }
#if PIPESCHED_WITH_MPI
  const ps::mpi::Groups groups(ps::ProcessGrid{.pipeline = o.ranks, .data = o.data, .tensor = 1});
  ps::mpi::Pipeline<Stage> pipe(s, stages, groups, {.executor = options});
  const int me = groups.coordinates().pipeline;
  ReplicaUpdate update(s.problem, stages, held_stages(s, me), sum_over(groups.pipeline()));
  return train(pipe, s, stages, config, o, me, update, replica_of(groups), {}, nullptr, vocabulary);
#else
  return 2;
#endif
}

#if PIPESCHED_WITH_MPI
// What the toy GPT trains of a plan on a laptop: at most this many sequences per step of the
// whole job (every process also runs the sequential reference on all of them) ...
constexpr long long toy_sequences = 4096;
// ... and at most this many stages (every process builds each one).
constexpr int toy_stages = 4096;

// The toy GPT of a plan: the plan's model (TransformerCost) with its microbatch size and layer
// split, or, for a plan made without a model, one block of width 16 per stage. Throws
// pipesched::error when the toy cannot be that model or this machine cannot hold it.
toy::GptConfig toy_of(const ps::tuning::Plan& plan, int stages, int processes,
                      std::vector<std::string>* notes = nullptr) {
  const auto* cost = std::any_cast<ps::TransformerCost>(&plan.cost);
  if (cost == nullptr)
    return {.vocabulary = 32,
            .hidden = 16,
            .heads = std::max(2, plan.tensor),
            .ffn = 32,
            .sequence = 16,
            .blocks = stages,
            .microbatch_size = plan.microbatch_size,
            .seed = 42};
  toy::GptConfig c = toy::gpt_config_of(cost->model, sizeof(double), 42, notes);
  c.microbatch_size = plan.microbatch_size;
  c.stage_blocks = plan.layers_per_stage;
  // What every process holds (it builds every stage and the sequential reference): two copies
  // of the weights and their gradients, in double, and one microbatch's activations through
  // the whole model (per token and layer about 16 widths and the attention probabilities).
  const ps::ModelShape& m = cost->model;
  const double weights = m.parameters() + double(m.sequence) * m.hidden;
  const double activations =
      8.0 * c.microbatch_size * m.sequence *
      (m.layers * (16.0 * m.hidden + 2.0 * m.heads * m.sequence) + 2.0 * m.vocabulary);
  const double need = processes * (4 * 8.0 * weights + activations);
  const double pages = static_cast<double>(::sysconf(_SC_PHYS_PAGES));
  const double here = pages * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  if (need > 0.5 * here)
    throw ps::error("the plan's model (" + std::to_string(m.layers) + " layers of width " +
                    std::to_string(m.hidden) + ", vocabulary " + std::to_string(m.vocabulary) +
                    ") needs about " + ps::format_memory(need, "bytes") + " over " +
                    std::to_string(processes) +
                    " processes as the toy GPT in double, more than half of this machine's " +
                    ps::format_memory(here, "bytes") +
                    "; plan a smaller model (pipesched profile writes one of the toy's)");
  return c;
}

// --plan: the plan placed on this job (nothing without --plan), or nothing after one sentence
// (from rank 0) when the file does not read as a plan, the job cannot run it (another size,
// tensor parallelism) or the toy GPT cannot be its model or hold it.
std::optional<ps::mpi::PlanRun> place(const std::string& path, int rank) {
  if (path.empty()) return std::nullopt;
  try {
    std::optional<ps::mpi::PlanRun> run(std::in_place, ps::read_plan_file(path), path);
    const ps::tuning::Plan& plan = run->plan();
    (void)toy_of(plan, run->schedule().problem.replica_stages(), plan.gpus);
    if (run->global_batch() > toy_sequences)
      throw ps::error(path + " trains " + std::to_string(run->global_batch()) +
                      " sequences per step (dp " + std::to_string(plan.data) + " × " +
                      std::to_string(plan.microbatches) + " microbatches × microbatch_size " +
                      std::to_string(plan.microbatch_size) + "); the toy GPT trains 1 to " +
                      std::to_string(toy_sequences) +
                      " per step, so plan with a smaller --global-batch");
    if (run->stages() > toy_stages)
      throw ps::error(path + " has " + std::to_string(run->stages()) +
                      " stages; the toy GPT builds 1 to " + std::to_string(toy_stages) +
                      ", so plan with fewer ranks or chunks");
    return run;
  } catch (const ps::error& e) {
    if (rank == 0) std::fprintf(stderr, "example_02_train_gpt: %s\n", e.what());
    return std::nullopt;
  }
}

// Trains the toy GPT through the plan's schedule on its grid: the plan's microbatches of its
// microbatch size per replica, SGD (on each replica's shard with ZeRO 1 or 2).
int run_plan(const ps::mpi::PlanRun& run, Options o) {
  const ps::tuning::Plan& plan = run.plan();
  const ps::Schedule& s = run.schedule();
  std::vector<std::string> notes;
  const toy::GptConfig config = toy_of(plan, s.problem.replica_stages(), plan.gpus, &notes);
  toy::GptConfig built = config;  // the stages' config: the split layers off, in the shards
  built.split_output = plan.vocabulary;
  built.split_input = s.has_input_vocabulary();
  std::vector<Stage> stages = make_stages(built, s, run.tensor_shard());
  // With the head (and the token table) split by vocabulary each pipeline rank holds its shard
  // of them (every tensor rank of it the whole shard); the reducer steps the stages, and after
  // each step the shards' gradients are averaged over the data-parallel group and stepped with
  // the same SGD.
  Vocabulary shards(config, plan.vocabulary ? s.rank_count() : 0, built.split_input);
  const auto* planned = std::any_cast<ps::TransformerCost>(&plan.cost);
  say("plan: %s (checkpoint %s) on pp %d x dp %d x tp %d processes, ZeRO-%d; %d microbatches "
      "of %d sequences x %d slices per replica, global batch %lld sequences\n",
      s.name.c_str(),
      plan.checkpoint_policy.empty() ? ps::to_string(plan.checkpoint)
                                     : plan.checkpoint_policy.c_str(),
      plan.grid().pipeline, plan.data, plan.tensor, plan.zero, plan.microbatches,
      plan.microbatch_size, s.problem.slices, run.global_batch());
  if (planned) {
    std::string split;
    for (int l : plan.layers_per_stage)
      split += (split.empty() ? "" : ",") + std::to_string(l);
    say("the plan's model as the toy GPT: %d blocks (%s per stage), width %d, %d heads, MLP %d, "
        "sequence %d, vocabulary %d\n",
        config.blocks, split.c_str(), config.hidden, config.heads, config.ffn, config.sequence,
        config.vocabulary);
    for (const std::string& n : notes)
      say("  (%s)\n", n.c_str());
  } else {
    say("toy GPT with %d blocks, one per stage (the plan was made without a model)\n",
        config.blocks);
  }
  if (s.problem.replicas > 1)
    say("%d replicas of the model in each pipeline (Chimera): each block's copies add up their "
        "SGD steps after each step\n",
        s.problem.replicas);
  if (plan.tensor > 1)
    say("each block split over %d tensor ranks: %d of %d heads and %d of %d MLP units each\n",
        plan.tensor, config.heads / plan.tensor, config.heads, config.ffn / plan.tensor,
        config.ffn);
  if (plan.vocabulary)
    say("the LM head and loss%s split by vocabulary over the %d pipeline ranks (VOCAB_F, VOCAB_B"
        "%s passes)\n",
        built.split_input ? " and the token table" : "", s.rank_count(),
        built.split_input ? ", EMBED_F, EMBED_B" : "");
  if (plan.sequence_parallel)
    say("the plan has sequence parallelism, which the toy does not implement: it runs without "
        "(the same numerics, more activation memory per tensor rank)\n");
  // [plan-pipeline]
  // run: a pipesched::mpi::PlanRun, s its schedule(); stages: run.stages() of them (this process
  // runs those that run.holds(stage)). Whatever the plan's ZeRO stage, the reducer steps this
  // replica's shard of the weights (with ZeRO-0 all of them) with the ShardOptimizer, and rolls
  // it back with the step.
  ps::mpi::Pipeline<Stage> pipe(s, stages, run.groups(),
                                {.reducer = run.reducer_options(ps::sgd_shards(0.1))});
  // [plan-pipeline]
  o.microbatches = plan.microbatches;
  const int me = run.coordinates().pipeline;
  ReplicaUpdate update(s.problem, stages, held_stages(s, me), sum_over(run.groups().pipeline()));
  std::vector<double> seconds;
  std::function<void()> shard_step;
  if (plan.vocabulary)
    shard_step = [&shards, me, comm = run.groups().data(), d = plan.data] {
      const auto grads = shards.gradients(me);
      const auto weights = shards.weights(me);
      for (std::size_t t = 0; t < weights.size(); ++t) {
        std::vector<double> g = *grads[t];
        if (d > 1)
          MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_DOUBLE, MPI_SUM,
                        comm);
        std::vector<double>& w = *weights[t];
        for (std::size_t i = 0; i < w.size(); ++i)
          w[i] -= 0.1 * (g[i] / d);
      }
    };
  const int failures =
      train(pipe, s, stages, config, o, me, update, replica_of(run.groups()), run.tensor_shard(),
            &seconds, plan.vocabulary ? &shards : nullptr, shard_step);
  // The measured step (the median after the first, which warms up) beside the plan's.
  if (seconds.size() > 1) seconds.erase(seconds.begin());
  std::sort(seconds.begin(), seconds.end());
  const double measured = seconds.empty() ? 0.0 : seconds[seconds.size() / 2];
  if (planned && planned->measured) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int per_pipeline = std::max(1, cores / (plan.data * plan.tensor));
    say("step time: measured %.2f ms; the plan predicts %.2f ms from this machine's layer "
        "profile (measured / predicted %.3f)",
        1e3 * measured, 1e3 * plan.makespan, measured / plan.makespan);
    if (plan.grid().pipeline > per_pipeline) {
      const double shared =
          ps::simulate(plan.schedule, *planned, ps::SharedCompute{per_pipeline}).makespan;
      say(", %.2f ms with %d processes sharing %d cores (%.3f)", 1e3 * shared, plan.gpus, cores,
          measured / shared);
    }
    say("\n");
  } else if (planned) {
    say("step time: measured %.2f ms; the plan's %.4g s is for device '%s', not this machine "
        "(plan from a layer profile of this machine to predict it: pipesched profile, tune "
        "--profile)\n",
        1e3 * measured, plan.makespan, planned->device.name.c_str());
  }
  return failures;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  Options o;
  int code = 0;
  if (!parse(argc, argv, o, code)) return code;
  if (o.transport == "inproc") {
    try {
      const int failures = run(o, -1);
      say(failures == 0 ? "every step matched the sequential reference\n" : "MISMATCHES: %d\n",
          failures);
      return failures == 0 ? 0 : 1;
    } catch (const ps::error& e) {
      std::fprintf(stderr, "example_02_train_gpt: %s\n", e.what());
      return 1;
    }
  }
#if PIPESCHED_WITH_MPI
  ps::mpi::Session session(argc, argv);
  quiet = session.rank() != 0;
  const std::optional<ps::mpi::PlanRun> plan = place(o.plan, session.rank());
  if (!o.plan.empty() && !plan) return 2;
  if (session.size() % o.data != 0) {
    if (!quiet)
      std::fprintf(stderr,
                   "example_02_train_gpt: --data-parallel %d but mpirun started %d processes; "
                   "start a multiple of %d (replicas x pipeline ranks)\n",
                   o.data, session.size(), o.data);
    return 2;
  }
  if (o.ranks_given && o.ranks * o.data != session.size()) {
    if (!quiet)
      std::fprintf(stderr,
                   "example_02_train_gpt: --ranks %d but mpirun started %d processes; with "
                   "--transport mpi there is one rank per process (drop --ranks or use "
                   "mpirun -np %d)\n",
                   o.ranks, session.size(), o.ranks * o.data);
    return 2;
  }
  o.ranks = session.size() / o.data;
  try {
    const int failures = plan ? run_plan(*plan, o) : run(o, session.rank());
    say(failures == 0 ? "every step matched the sequential reference\n" : "MISMATCHES: %d\n",
        failures);
    return failures == 0 ? 0 : 1;
  } catch (const ps::peer_lost& e) {
    std::fprintf(stderr, "%s\n", e.what());
    session.abort(1);
  } catch (const ps::error& e) {
    std::fprintf(stderr, "example_02_train_gpt (rank %d): %s\n", session.rank(), e.what());
    return 1;
  }
#else
  std::fprintf(stderr,
               "example_02_train_gpt: this build has no MPI transport (MPI was not found when "
               "it was configured); use --transport inproc or install MPI and rebuild\n");
  return 2;
#endif
}
