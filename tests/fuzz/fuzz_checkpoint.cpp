// Fuzz target: the checkpoint passes (apply_checkpoint in every mode, checkpoint_mario with its
// knobs), after offloading (apply_offload) where a bit asks, then with vocabulary passes
// (add_vocabulary_passes) where another does, on small generated schedules. The
// input's first bytes choose the schedule (built-in generator, 1-4 ranks, 1-8 microbatches, 1-3
// chunks, 1-2 slices, fused or split backward), UniformCost's figures and the mode; the rest is a
// memory budget's text as --memory-budget reads it (parse_memory_budget; empty: a byte sets it). A
// refusal (pipesched::error) is an answer; what comes out validates, simulates without deadlock
// within the budget on every rank, recomputes nothing where nothing is needed, and survives
// everything a schedule goes through (fuzz_harness.hpp).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_harness.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/pass/offload.hpp"
#include "pipesched/pass/vocabulary.hpp"
#include "pipesched/policy/registry.hpp"

namespace {

//! Recompute actions (R and RL) in `s`.
int recomputes(const pipesched::Schedule& s) {
  int n = 0;
  for (const auto& list : s.ranks)
    for (const pipesched::Action& a : list)
      n += a.kind == pipesched::OpKind::R;
  return n;
}

}  // namespace

int pipesched_fuzz_checkpoint(const std::uint8_t* data, std::size_t size) {
  using namespace pipesched;
  constexpr std::size_t head = 10;
  if (size < head) return 0;
  auto byte = [&](std::size_t i) { return static_cast<int>(data[i]); };
  const std::span<const GeneratorInfo> gens = builtin_generators();
  const GeneratorInfo& gen = gens[static_cast<std::size_t>(byte(0)) % gens.size()];
  Problem p;
  p.ranks = 1 + byte(1) % 4;
  p.microbatches = 1 + byte(2) % 8;
  const int chunks = gen.chunks_vary ? 1 + byte(3) % 3 : gen.default_chunks;
  p.stages = p.ranks * chunks;
  p.slices = gen.slices ? 1 + (byte(3) >> 4) % 2 : 1;
  const WGradMode wgrad = !gen.split                         ? WGradMode::Fused
                          : !gen.fused || (byte(4) & 1) != 0 ? WGradMode::Split
                                                             : WGradMode::Fused;
  const CheckpointMode mode = static_cast<CheckpointMode>((byte(4) >> 1) % 6);
  UniformCost cost;
  cost.f = 1 + byte(5) % 4;
  cost.b = 1 + (byte(5) >> 2) % 4;
  cost.w = (byte(5) >> 4) % 3;
  cost.r = 1 + (byte(5) >> 6) % 2;
  cost.boundary = (byte(6) % 5) / 10.0;
  cost.w_memory = ((byte(6) >> 3) % 3) / 4.0;
  if (wgrad == WGradMode::Split && cost.w >= cost.b) cost.w = 0;
  if (!fuzz::answers([&] { cost.check(); })) return 0;
  // The budget: the rest of the input as text, or from byte 7 (0: none); byte 8 lowers one
  // rank's.
  MemoryBudget budget;
  if (size > head) {
    MemoryBudgetValue v;
    if (!fuzz::answers([&] {
          v = parse_memory_budget(
              std::string_view(reinterpret_cast<const char*>(data) + head, size - head));
        }))
      return 0;
    fuzz::require(v.value > 0 && std::isfinite(v.value), "a memory budget read out of range");
    if (v.bytes) return 0;  // UniformCost counts microbatches
    budget.all = v.value;
  } else if (byte(7) > 0) {
    budget.all = byte(7) / 16.0;
  }
  if (byte(8) > 0 && budget.limited()) {
    budget.per_rank.assign(static_cast<std::size_t>(p.ranks), budget.all);
    budget.per_rank[static_cast<std::size_t>(byte(8) % p.ranks)] =
        budget.all * (byte(8) % 4 + 1) / 5;
  }
  Schedule s;
  if (!fuzz::answers([&] { s = gen.generate(p, wgrad); })) return 0;
  fuzz::require(check(s).ok(), "a generator's schedule does not validate", check(s).summary());
  // The pass: apply_checkpoint, or Mario with its knobs (byte 9's low bits) when they are not
  // all on.
  Schedule out;
  MarioOptions knobs;
  knobs.hoist = (byte(9) & 1) == 0;
  knobs.prepose = (byte(9) & 2) == 0;
  knobs.choose = (byte(9) & 4) == 0;
  knobs.passes = 1 + (byte(9) >> 3) % 3;
  knobs.max_prepose = (byte(9) >> 5) % 4 - 1;
  const bool own_knobs = mode == CheckpointMode::Mario && (byte(9) & 7) != 0;
  // Offloading first (byte 1's bit 4), as assemble_plan does with PlanRecipe::offload: not with
  // Mario, nor with slices (apply_offload refuses those).
  const bool offload = (byte(1) & 16) != 0 && mode != CheckpointMode::Mario;
  cost.copy = (byte(1) >> 5) % 4;
  if (!fuzz::answers([&] {
        if (offload) {
          out = without_offload_of_recomputed(
              apply_checkpoint(apply_offload(s, cost, budget), mode, cost, budget));
          return;
        }
        out = own_knobs ? checkpoint_mario(s, cost, budget, knobs)
                        : apply_checkpoint(s, mode, cost, budget);
      }))
    return 0;
  const std::string form = to_text(out);
  ValidationReport rep = check(out);
  fuzz::require(rep.ok(), "a checkpoint pass made a schedule that does not validate",
                rep.summary() + "\n" + form);
  fuzz::require(out.problem == s.problem, "a checkpoint pass changed the problem", form);
  const SimulationResult sim = simulate(out, cost);
  fuzz::require(!sim.deadlock, "a checkpointed schedule deadlocks", sim.deadlock_report + form);
  if (budget.limited())
    for (int r = 0; r < out.rank_count(); ++r) {
      const double peak = sim.ranks[static_cast<std::size_t>(r)].peak_memory;
      const double limit = budget.of(r);
      fuzz::require(peak <= limit + 1e-9 * std::max(1.0, limit),
                    "a checkpointed schedule's simulated peak is over its budget",
                    "rank " + std::to_string(r) + ": " + std::to_string(peak) + " > " +
                        std::to_string(limit) + "\n" + form);
    }
  const int n = recomputes(out);
  if (mode == CheckpointMode::None && !offload)
    fuzz::require(out == s, "checkpointing 'none' changed the schedule", form);
  if (!budget.limited())
    fuzz::require(out.count(OpKind::Offload) == 0, "offloading under no budget", form);
  if (!budget.limited() &&
      (mode == CheckpointMode::Selective || mode == CheckpointMode::SelectiveEarly ||
       mode == CheckpointMode::Mario))
    fuzz::require(n == recomputes(s), "a budget-driven pass recomputes under no budget", form);
  if (mode == CheckpointMode::Full || mode == CheckpointMode::FullEarly)
    fuzz::require(n > 0, "full checkpointing recomputes nothing", form);
  // Vocabulary passes last (byte 2's top bit), as assemble_plan adds them: a placement that
  // validates, simulates without deadlock and runs one VOCAB_F and one VOCAB_B of every shard
  // for every microbatch and slice (and, with the input embedding split, byte 2's bit 6, one
  // EMBED_F and one EMBED_B).
  if ((byte(2) & 128) != 0) {
    cost.vf = (byte(6) >> 5) % 3 / 2.0;
    cost.comm = (byte(9) >> 7) / 4.0;
    cost.input_vocabulary = (byte(2) & 64) != 0;
    Schedule v;
    if (fuzz::answers([&] { v = add_vocabulary_passes(out, cost); })) {
      const std::string vform = to_text(v);
      const ValidationReport vrep = check(v);
      fuzz::require(vrep.ok(), "vocabulary passes were placed where they break a rule",
                    vrep.summary() + "\n" + vform);
      const std::size_t units = static_cast<std::size_t>(p.ranks) *
                                static_cast<std::size_t>(p.microbatches) *
                                static_cast<std::size_t>(v.problem.slices);
      fuzz::require(v.count(OpKind::VocabF) == units && v.count(OpKind::VocabB) == units,
                    "a shard misses a vocabulary pass", vform);
      const std::size_t embeds = cost.input_vocabulary ? units : 0;
      fuzz::require(v.count(OpKind::EmbedF) == embeds && v.count(OpKind::EmbedB) == embeds,
                    "a shard misses an input embedding pass", vform);
      const SimulationResult vsim = simulate(v, cost);
      fuzz::require(!vsim.deadlock, "a schedule with vocabulary passes deadlocks",
                    vsim.deadlock_report + vform);
      out = v;
    }
  }
  fuzz::exercise(out);
  return 0;
}

#ifndef PIPESCHED_FUZZ_REPLAY
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return pipesched_fuzz_checkpoint(data, size);
}
#endif
