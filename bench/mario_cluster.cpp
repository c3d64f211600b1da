// Mario over whole clusters: GPT-3 13B and Llama 2 7B / 13B on A100 40GB and 80GB clusters of
// 16, 32 and 64 GPUs (8 per node), a global batch of 4 sequences per GPU. For each point one
// cluster search (pipeline x data x tensor parallelism, layer splits, microbatch sizes 1-4,
// schedules 1F1B, interleaved 1F1B (2 chunks) and Chimera, checkpointing none / selective /
// full / Mario; TransformerCost with the optimizer step and workspace) gives, per scheme, its
// best plan without checkpointing, with conventional checkpointing (the better of selective
// and full, as Megatron-LM runs them: recompute inside the backward) and with Mario. Printed
// per scheme:
//   (a) conventional / Mario, beside the ceiling the model implies: the conventional plan's
//       step over the same schedule's step with every recompute free;
//   (b) no checkpointing / Mario;
//   (a) x (b), and full checkpointing at the configuration of the no-checkpoint plan / Mario
//       (a checkpointed baseline at a fixed configuration, as the paper's 1.57x suggests);
//   Mario's recompute overhead (its step over the same configuration without checkpointing or
//       memory limit) beside a bound: the recompute selective checkpointing needs to fit
//       there, less the idle time of each rank in that schedule that a recompute could use
//       (between the end of its first forward and the start of its last backward), over that
//       step.
// Prints markdown; the means and maxima close the report.
//
//   build/default/bench/mario_cluster [--quick] [--terms T]   (--quick: 16 GPUs only;
//   --terms: which cost-model terms apply, bench/cost_terms.hpp, default all)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cost_terms.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/io/plan_file.hpp"
#include "pipesched/tune/tune.hpp"

namespace ps = pipesched;
using ps::CheckpointMode;

namespace {

// TransformerCost with recomputes free: what a schedule would take if checkpointing cost
// nothing but memory.
struct FreeRecompute {
  ps::TransformerCost cost;
  double duration(const ps::CostContext& ctx, const ps::Action& a) const {
    return a.kind == ps::OpKind::R ? 0.0 : cost.duration(ctx, a);
  }
  double memory_delta(const ps::CostContext& ctx, const ps::Action& a, bool ckpt) const {
    return cost.memory_delta(ctx, a, ckpt);
  }
  double transfer_time(const ps::CostContext& ctx, const ps::Action& a) const {
    return cost.transfer_time(ctx, a);
  }
  double step_tail(const ps::CostContext& ctx, int rank) const { return cost.step_tail(ctx, rank); }
  static constexpr ps::MemoryUnit memory_unit = ps::MemoryUnit::Bytes;
};

// The plan's configuration searched alone with `modes` (and `budget`, unlimited when given
// empty): its best plan.
std::optional<ps::tuning::Plan> at_config(const ps::tuning::Plan& p,
                                          std::vector<CheckpointMode> modes,
                                          std::optional<ps::MemoryBudget> budget = std::nullopt) {
  ps::tuning::Request req;
  req.ranks = p.schedule.problem.ranks;
  req.global_batch = p.microbatches * p.microbatch_size;
  req.bases = {p.base};
  req.chunks = {p.chunks};
  req.microbatch_sizes = {p.microbatch_size};
  req.checkpoints = std::move(modes);
  req.full_fallback = false;
  req.budget = budget;
  req.threads = 1;
  const ps::TransformerCost c = ps::cost_of<ps::TransformerCost>(p);
  const ps::tuning::Result r =
      ps::tune(req, ps::tuning::TransformerCostFactory{c.model, c.device, c.parallel});
  return r.best;
}

struct Stat {
  std::vector<double> v;
  void add(double x) { v.push_back(x); }
  std::string text() const {
    if (v.empty()) return "-";
    double sum = 0, most = 0;
    for (double x : v) {
      sum += x;
      most = std::max(most, x);
    }
    char t[64];
    std::snprintf(t, sizeof t, "%.3fx mean, %.3fx max (%zu)", sum / v.size(), most, v.size());
    return t;
  }
};

std::string short_plan(const std::optional<ps::tuning::Plan>& p) {
  if (!p) return "does not fit";
  char t[200];
  std::snprintf(t, sizeof t, "pp%d dp%d tp%d, %d mb of %d%s: %.3f s", p->schedule.problem.ranks,
                p->data, p->tensor, p->microbatches, p->microbatch_size,
                p->recomputes ? (", " + std::to_string(p->recomputes) + " R").c_str() : "",
                p->makespan);
  return t;
}

std::string ratio(double x) {
  char t[32];
  std::snprintf(t, sizeof t, "%.3fx", x);
  return t;
}

// The idle time of rank `r` in `sim` that a recompute could use: the waits between the end of
// its first forward and the start of its last input backward (before the first forward there
// is nothing to recompute, after the last backward nothing is left to need it).
double usable_idle(const ps::Schedule& s, const ps::SimulationResult& sim, int r) {
  const auto& list = s.ranks[static_cast<std::size_t>(r)];
  const auto& timing = sim.timing[static_cast<std::size_t>(r)];
  int first = -1, last = -1;
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    const ps::OpKind k = list[static_cast<std::size_t>(i)].kind;
    if (first < 0 && (k == ps::OpKind::F || k == ps::OpKind::Overlap)) first = i;
    if (ps::is_input_backward(k) || k == ps::OpKind::Overlap) last = i;
  }
  double idle = 0;
  for (int i = first + 1; first >= 0 && i <= last; ++i)
    idle += std::max(0.0, timing[static_cast<std::size_t>(i)].start -
                              timing[static_cast<std::size_t>(i - 1)].end);
  return idle;
}

}  // namespace

int main(int argc, char** argv) {
  const ps::bench::ReportArgs args = ps::bench::read_report_args(
      argc, argv, "usage: mario_cluster [--quick] [--terms T]\n  --quick    16 GPUs only\n", false);
  const bool quick = args.quick;
  const ps::bench::CostTerms terms = args.terms;
  const std::vector<int> sizes = quick ? std::vector<int>{16} : std::vector<int>{16, 32, 64};
  const char* schemes[] = {"1f1b", "interleaved-1f1b", "chimera"};
  struct Variant {
    const char* name;
    bool tensor;
    int zero;
  };
  double total_seconds = 0, slowest = 0;
  std::printf("# Mario over whole clusters (bench/mario_cluster)\n\n");
  std::printf("Cost-model terms: %s.\n", ps::bench::describe(terms).c_str());
  for (const Variant variant : {Variant{"pipeline x data x tensor parallelism, ZeRO-1", true, 1},
                                Variant{"pipeline x data parallelism, no ZeRO", false, 0}}) {
    Stat a_all, b_all, ab_all, fixed_all, a_bind, b_bind, ceiling_gap;
    std::printf("\n# Searched: %s\n", variant.name);
    for (const char* model_name : {"gpt3-13b", "llama2-7b", "llama2-13b"}) {
      const ps::ModelShape model =
          ps::bench::with_terms(ps::presets::find_model(model_name), terms);
      for (const char* device_name : {"a100-40gb", "a100-80gb"}) {
        const ps::DeviceSpec device =
            ps::bench::with_terms(ps::presets::find_device(device_name), terms);
        std::printf("\n## %s on %s\n\n", model_name, device_name);
        std::printf(
            "| GPUs | scheme | no checkpointing | conventional | Mario | (a) conv / Mario "
            "(ceiling) | (b) none / Mario | (a) x (b) | full at (b)'s config / Mario | Mario "
            "overhead (bound) | search |\n");
        std::printf("|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|\n");
        for (int gpus : sizes) {
          ps::tuning::ClusterRequest req;
          req.gpus = gpus;
          req.global_batch = 4 * gpus;
          req.search.bases = {"1f1b", "interleaved-1f1b", "chimera"};
          if (!variant.tensor) req.tensor = {1};
          req.zero = variant.zero;
          req.search.chunks = {2};
          req.search.microbatch_sizes = {1, 2, 4};
          req.search.checkpoints = {CheckpointMode::None, CheckpointMode::Selective,
                                    CheckpointMode::Full, CheckpointMode::Mario};
          const ps::tuning::Result r = ps::tune_cluster(req, model, device);
          total_seconds += r.seconds;
          slowest = std::max(slowest, r.seconds);
          for (const char* scheme : schemes) {
            auto plan = [&](CheckpointMode m) -> std::optional<ps::tuning::Plan> {
              const ps::tuning::Baseline* b = r.baseline(scheme, m);
              return b ? b->plan : std::nullopt;
            };
            const auto none = plan(CheckpointMode::None), mario = plan(CheckpointMode::Mario);
            std::optional<ps::tuning::Plan> conv = plan(CheckpointMode::Selective);
            if (const auto full = plan(CheckpointMode::Full); full)
              ps::detail::keep_better(conv, *full);
            std::string a = "-", b = "-", ab = "-", fixed = "-", overhead = "-";
            if (mario && conv) {
              const double ra = conv->makespan / mario->makespan;
              const ps::SimulationResult free = ps::simulate(
                  conv->schedule, FreeRecompute{ps::cost_of<ps::TransformerCost>(*conv)});
              const double ceiling = conv->makespan / free.makespan;
              a = ratio(ra) + " (" + ratio(ceiling) + ")";
              a_all.add(ra);
              ceiling_gap.add(ceiling / ra);
              if (mario->recomputes > 0) a_bind.add(ra);
              if (none) {
                const double rb = none->makespan / mario->makespan;
                b = ratio(rb);
                ab = ratio(ra * rb);
                b_all.add(rb);
                ab_all.add(ra * rb);
                if (mario->recomputes > 0) b_bind.add(rb);
                if (const auto f = at_config(*none, {CheckpointMode::Full}); f) {
                  fixed = ratio(f->makespan / mario->makespan);
                  fixed_all.add(f->makespan / mario->makespan);
                }
              }
            }
            if (mario && mario->recomputes > 0) {
              const auto base = at_config(*mario, {CheckpointMode::None}, ps::MemoryBudget{});
              const auto selective = at_config(*mario, {CheckpointMode::Selective});
              if (base) {
                double bound = 0;
                if (selective) {
                  const ps::TransformerCost c = ps::cost_of<ps::TransformerCost>(*mario);
                  const ps::SimulationResult base_sim = ps::simulate(base->schedule, c);
                  const ps::Schedule& s = selective->schedule;
                  const ps::CostContext ctx{s.problem, s.placement, 1};
                  for (int rk = 0; rk < s.rank_count(); ++rk) {
                    double work = 0;
                    for (const ps::Action& x : s.ranks[static_cast<std::size_t>(rk)])
                      if (x.kind == ps::OpKind::R) work += c.duration(ctx, x);
                    bound = std::max(bound, work - usable_idle(base->schedule, base_sim, rk));
                  }
                }
                char t[64];
                std::snprintf(t, sizeof t, "%+.1f %% (%+.1f %%)",
                              100 * (mario->makespan / base->makespan - 1),
                              100 * std::max(0.0, bound) / base->makespan);
                overhead = t;
              }
            }
            std::printf("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f s |\n", gpus,
                        scheme, short_plan(none).c_str(), short_plan(conv).c_str(),
                        short_plan(mario).c_str(), a.c_str(), b.c_str(), ab.c_str(), fixed.c_str(),
                        overhead.c_str(), r.seconds);
            std::fflush(stdout);
          }
        }
      }
    }
    std::printf("\n## Summary: %s\n\n", variant.name);
    std::printf("| figure | pipesched | paper |\n|---|---|---|\n");
    std::printf("| (a) Mario over conventional checkpointing, tuned | %s | - |\n",
                a_all.text().c_str());
    std::printf("| (a) where Mario recomputes (memory binds) | %s | - |\n", a_bind.text().c_str());
    std::printf(
        "| (a)'s ceiling over (a): 1.000x at the ceiling, below it where Mario also changed the "
        "configuration | %s | - |\n",
        ceiling_gap.text().c_str());
    std::printf("| (b) Mario over no checkpointing, tuned | %s | 1.16x mean |\n",
                b_all.text().c_str());
    std::printf("| (b) where Mario recomputes | %s | - |\n", b_bind.text().c_str());
    std::printf("| (a) x (b) | %s | 1.57x mean |\n", ab_all.text().c_str());
    std::printf("| full checkpointing at (b)'s configuration / Mario | %s | 1.57x mean |\n",
                fixed_all.text().c_str());
  }
  std::printf("\nSearch: %.1f s in all, %.1f s for the slowest point.\n", total_seconds, slowest);
  return 0;
}
