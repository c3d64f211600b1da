// The tuner's evaluation: for one configuration, build its base schedule (generate, fit the
// order's memory knob, place W parts) under its cost model and budget, checkpoint it,
// simulate, and settle each candidate on the scoreboard. Phase one takes every configuration
// (its base and full checkpointing, both cheap, and the modes that need no recompute there);
// phase two runs selective and Mario where the base is over the budget and full
// checkpointing is not.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/analysis/cost_capabilities.hpp"
#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/schedule.hpp"
#include "pipesched/core/stop_token.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/pass/reduce_gradients.hpp"
#include "pipesched/policy/assemble.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/cost_factory.hpp"
#include "pipesched/tune/detail/bounds.hpp"
#include "pipesched/tune/detail/grid.hpp"
#include "pipesched/tune/detail/plans.hpp"
#include "pipesched/tune/detail/scoreboard.hpp"
#include "pipesched/tune/detail/search_space.hpp"
#include "pipesched/tune/request.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched::detail {

//! Evaluates configurations of `grid`; phase_one and phase_two may run on several threads at
//! once, each configuration's phase one on one thread (it writes what it learns into the
//! configuration, which phase two reads after every phase-one call has returned).
//!
//! Stopping: each call polls `stop` between its simulations and hands it to the selective and
//! Mario passes, which poll it inside. A candidate stop cuts short is neither settled nor
//! kept (the search is over: the caller's stop test says so before the next call), so every
//! plan on the board is complete.
template <class Cost>
class Evaluator {
 public:
  //! An evaluator of `grid`'s configurations of `request` over `scenarios`, settling on
  //! `board`, stopping where `stop` says.
  Evaluator(const tuning::Request& request, const SearchSpace& space,
            const std::vector<TuneScenario<Cost>>& scenarios, TuneGrid<Cost>& grid,
            Scoreboard& board, StopToken stop = {})
      : request_(request),
        space_(space),
        scenarios_(scenarios),
        grid_(grid),
        board_(board),
        stop_(stop) {
    for (const GeneratorInfo& g : generators())
      if (g.mario) mario_orders_ += (mario_orders_.empty() ? "" : ", ") + std::string(g.name);
  }

  //! Phase one of the configuration at grid position `index`: pruned by its work bound, or
  //! built and simulated as it is and with full checkpointing; settles every candidate but
  //! those phase two runs (selective and Mario where the base is over the budget and full
  //! checkpointing is not).
  void phase_one(std::size_t index) {
    TuneConfig<Cost>& cfg = grid_.configs[index];
    // Safe: the work bound holds for every plan of this configuration, whatever mode.
    bool all_beaten = true;
    for (CheckpointMode m : space_.config_modes)
      all_beaten = all_beaten && cannot_beat(cfg.work_bound, board_.rival(cfg.generator, m));
    for (std::size_t j = 0; j < space_.policies.size(); ++j)
      all_beaten =
          all_beaten && cannot_beat(cfg.work_bound, board_.rival_of_policy(cfg.generator, j));
    if (all_beaten) {
      cfg.refused = true;  // nothing left to do for it
      board_.settle(space_.modes, Settled::Pruned);
      return;
    }
    if (cfg.vocabulary) {
      settle_vocabulary_modes(index);
      return;
    }
    std::optional<Built> b;
    SimulationResult sim;
    if (!build_base(index, b, sim)) return;
    if (stop_.stop_requested()) return;  // the search is over: leave the rest unsettled
    cfg.base_fits = fits_budget(peaks_of(sim), b->budget);
    cfg.lower_bound = std::max(cfg.work_bound, makespan_lower_bound(b->base, b->cost, sim));
    if (space_.want_none) {
      if (cfg.base_fits)
        board_.keep(make_plan(cfg, index, CheckpointMode::None, *b, b->base, sim), cfg.generator);
      else
        board_.over_budget(point(cfg, index, CheckpointMode::None, *b, b->base, sim));
    }
    if (!settle_full(index, *b)) return;
    settle_on_fitting_base(index, *b, sim);
  }

  //! Phase two of the configuration at grid position `index` in `mode` (selective, selective
  //! early or Mario): pruned by its lower bound, or checkpointed, simulated and settled.
  void phase_two(std::size_t index, CheckpointMode mode) {
    const TuneConfig<Cost>& cfg = grid_.configs[index];
    if (mode == CheckpointMode::Mario && cfg.offloaded) {
      board_.settle(1, Settled::Pruned);  // Mario places no offloads: its own configuration's
      return;
    }
    if (mode == CheckpointMode::Mario && !mario_applies(index)) return;
    if (cannot_beat(cfg.lower_bound, board_.rival(cfg.generator, mode))) {
      board_.settle(1, Settled::Pruned);
      return;
    }
    settle_checkpointed(index, mode, {}, [&](const Built& b) { return checkpointed(b, mode); });
  }

  //! The step of the configuration at grid position `index` in checkpoint `mode` with its
  //! cost model's layers per stage set to `layers` (the layout phase's measure): built,
  //! checkpointed and simulated as phases one and two do; infinity where it deadlocks, is over
  //! its budget or cannot be built.
  double layout_step(std::size_t index, CheckpointMode mode,
                     const std::vector<int>& layers) const requires requires(Cost& c) {
    c.parallel.layers = layers;
  }
  {
    const double none = std::numeric_limits<double>::infinity();
    const TuneConfig<Cost>& cfg = grid_.configs[index];
    try {
      Cost cost = grid_.cost_of(cfg, request_.slicing);
      cost.parallel.layers = layers;
      if (cfg.vocabulary) {
        const AssembledPlan<Cost> a = vocabulary_plan(cfg, cost, mode, nullptr);
        const SimulationResult sim = simulate(a.schedule, a.cost);
        if (sim.deadlock || !fits_budget(peaks_of(sim), a.budget)) return none;
        return sim.makespan;
      }
      const Built b = build(cfg, std::move(cost));
      const Schedule s = mode == CheckpointMode::None ? b.base : checkpointed(b, mode);
      const SimulationResult sim = simulate(s, b.cost);
      if (sim.deadlock || !fits_budget(peaks_of(sim), b.budget)) return none;
      return sim.makespan;
    } catch (const same_as_own&) {
      return none;
    } catch (const invalid_problem&) {
      return none;
    } catch (const invalid_schedule&) {
      return none;
    }
  }

  //! The program's own policy `j` on the configuration at grid position `index` (one that
  //! phase one built): pruned by its lower bound, or applied, simulated and settled.
  void phase_policy(std::size_t index, std::size_t j) {
    const TuneConfig<Cost>& cfg = grid_.configs[index];
    const CheckpointInfo& policy = *space_.policies[j];
    if (cannot_beat(cfg.lower_bound, board_.rival_of_policy(cfg.generator, j))) {
      board_.settle(1, Settled::Pruned);
      return;
    }
    if (!policy.runs_on(*cfg.generator)) {
      board_.refuse(index, cfg.cluster + std::string(cfg.generator->name),
                    "checkpoint policy " + std::string(policy.name) + " does not run on " +
                        std::string(cfg.generator->name),
                    1);
      return;
    }
    if (cfg.vocabulary) {
      settle_vocabulary(index, CheckpointMode::None, &policy);
      return;
    }
    settle_checkpointed(index, CheckpointMode::None, std::string(policy.name), [&](const Built& b) {
      return policy.apply(b.base, CostRef(b.cost), b.budget);
    });
  }

 private:
  struct same_as_own {};  // a fitted configuration without a budget: nothing to fit
  //! A configuration's base schedule with its cost model (sliced) and budget.
  struct Built {
    Cost cost;
    MemoryBudget budget;
    Schedule base;
  };

  //! A built base checkpointed in `mode` (full, selective or Mario, late or early) as the
  //! search's passes checkpoint it.
  //! An offloaded base keeps the offloads of the units the mode does not recompute.
  Schedule checkpointed(const Built& b, CheckpointMode mode) const {
    return checkpointed(b.base, b.cost, b.budget, mode);
  }
  //! checkpointed(built, mode) of base `s` under `cost` and `budget`; None leaves it as it is.
  Schedule checkpointed(const Schedule& s, const Cost& cost, const MemoryBudget& budget,
                        CheckpointMode mode) const {
    if (mode == CheckpointMode::None) return s;
    if (is_full(mode)) return without_offload_of_recomputed(checkpoint_full(s, timing_of(mode)));
    if (is_selective(mode))
      return checkpoint_selective(s, cost, budget, nullptr, timing_of(mode), stop_);
    return checkpoint_mario(s, cost, budget, request_.mario, stop_);
  }

  //! The plan of vocabulary-parallel configuration `cfg` under `cost` (its output layer
  //! split) in checkpoint `mode`, or by the program's `policy` where given: assembled as
  //! assemble_plan assembles it with PlanRecipe::vocabulary, steps 1-4 as build() and
  //! checkpointed() do them, the passes last within the budget (the plan built again under a
  //! smaller budget where they take a rank over, each lag tried): what `pipesched simulate
  //! --vocab-parallel` with the plan's options builds. Throws same_as_own for a fitted
  //! configuration without a budget, and what assemble_plan throws.
  AssembledPlan<Cost> vocabulary_plan(const TuneConfig<Cost>& cfg, const Cost& cost,
                                      CheckpointMode mode, const CheckpointInfo* policy) const {
    const Problem problem = problem_of(cfg);
    PlanRecipe recipe = recipe_of(cfg);
    recipe.vocabulary = true;
    const Schedule own = generate_own(*cfg.generator, problem, recipe, cost);
    const TuneScenario<Cost>& sc = scenarios_[cfg.scenario];
    const MemoryBudget budget =
        sc.budget ? *sc.budget : default_memory_budget(cost, own.problem, own.placement);
    if (cfg.fitted && !budget.limited()) throw same_as_own{};
    if (policy) return assemble_plan(*cfg.generator, problem, cost, budget, recipe, *policy, &own);
    return assemble_plan(
        *cfg.generator, problem, cost, budget, recipe, mode != CheckpointMode::None,
        [&](const Schedule& s, const Cost& c, const MemoryBudget& b) {
          return checkpointed(s, c, b, mode);
        },
        &own);
  }

  //! Every mode of vocabulary-parallel configuration `index` (phase one does it all: each
  //! candidate is planned whole, passes included, by vocabulary_plan).
  void settle_vocabulary_modes(std::size_t index) {
    // The base without the passes first: a configuration the order or the model refuses is
    // refused (or pruned) in every mode, with its reason, as any other.
    std::optional<Built> built;
    SimulationResult base;
    if (!build_base(index, built, base)) return;
    TuneConfig<Cost>& cfg = grid_.configs[index];
    cfg.base_fits = true;              // nothing left for phase two
    cfg.lower_bound = cfg.work_bound;  // the passes move the backwards: the work bound holds
    for (CheckpointMode m : space_.config_modes) {
      if (stop_.stop_requested()) return;
      if (m == CheckpointMode::Mario && !mario_applies(index)) continue;
      settle_vocabulary(index, m, nullptr);
    }
  }

  //! One candidate of vocabulary-parallel configuration `index` (`mode`, or the program's
  //! `policy`): planned by vocabulary_plan, simulated and settled as settle_checkpointed does.
  void settle_vocabulary(std::size_t index, CheckpointMode mode, const CheckpointInfo* policy) {
    const TuneConfig<Cost>& cfg = grid_.configs[index];
    try {
      const AssembledPlan<Cost> a =
          vocabulary_plan(cfg, grid_.cost_of(cfg, request_.slicing), mode, policy);
      if (stop_.stop_requested()) return;
      const SimulationResult sim = simulate(a.schedule, a.cost);
      const Built b{a.cost, a.budget, a.schedule};
      if (sim.deadlock) {
        board_.settle(1, Settled::OverBudget);
        return;
      }
      if (!fits_budget(peaks_of(sim), a.budget)) {
        tuning::Point over = point(cfg, index, mode, b, a.schedule, sim);
        if (policy) over.checkpoint = policy->name;
        board_.over_budget(std::move(over));
        return;
      }
      tuning::Plan p = make_plan(cfg, index, mode, b, a.schedule, sim);
      if (policy) p.checkpoint_policy = policy->name;
      board_.keep(std::move(p), cfg.generator);
    } catch (const same_as_own&) {
      board_.settle(1, Settled::Pruned);
    } catch (const work_stopped&) {
      // cut short: dropped
    } catch (const invalid_problem&) {
      board_.settle(1, Settled::OverBudget);  // nothing within the budget, whatever the lag
    } catch (const invalid_schedule& e) {
      board_.refuse(
          index,
          cfg.label() + ", " + (policy ? std::string(policy->name) : std::string(to_string(mode))),
          e.message(), 1);
    }
  }

  //! One checkpointed candidate of the configuration at `index`: its base built again,
  //! checkpointed by `apply(built)` (a built-in `mode`, or the program's policy `policy` with
  //! mode None), simulated and settled: kept, over the budget, or refused. A candidate the
  //! stop token cuts is dropped, never reported; a pass that finds nothing within the budget
  //! settles it as over.
  template <class Apply>
  void settle_checkpointed(std::size_t index, CheckpointMode mode, const std::string& policy,
                           Apply&& apply) {
    const TuneConfig<Cost>& cfg = grid_.configs[index];
    try {
      const Built b = build(cfg);
      const Schedule s = apply(b);
      if (stop_.stop_requested()) return;  // cut before its simulation: dropped
      const SimulationResult sim = simulate(s, b.cost);
      if (sim.deadlock) {
        board_.settle(1, Settled::OverBudget);
        return;
      }
      if (!fits_budget(peaks_of(sim), b.budget)) {
        tuning::Point over = point(cfg, index, mode, b, s, sim);
        if (!policy.empty()) over.checkpoint = policy;
        board_.over_budget(std::move(over));
        return;
      }
      tuning::Plan p = make_plan(cfg, index, mode, b, s, sim);
      p.checkpoint_policy = policy;
      board_.keep(std::move(p), cfg.generator);
    } catch (const work_stopped&) {
      // Cut short by the deadline or the caller's flag (or a policy's own token): dropped.
    } catch (const invalid_problem&) {
      board_.settle(1, Settled::OverBudget);  // the pass found nothing within the budget
    } catch (const invalid_schedule& e) {
      board_.refuse(index,
                    cfg.label() + ", " + (policy.empty() ? std::string(to_string(mode)) : policy),
                    e.message(), 1);
    }
  }

  //! The problem of configuration `cfg`.
  static Problem problem_of(const TuneConfig<Cost>& cfg) {
    return Problem{.ranks = cfg.ranks,
                   .stages = cfg.ranks * cfg.chunks,
                   .microbatches = cfg.microbatches,
                   .slices = cfg.slices};
  }
  //! What assemble_plan is asked for `cfg`: its weight-gradient mode, fine W and fitting.
  PlanRecipe recipe_of(const TuneConfig<Cost>& cfg) const {
    return PlanRecipe{.wgrad = cfg.fine ? WGradMode::Split : cfg.generator->default_wgrad,
                      .fine_wgrad = cfg.fine,
                      .wgrad_parts = request_.wgrad_parts,
                      .fit = cfg.fitted ? FitOrder::Fitted : FitOrder::Own};
  }

  //! Builds the base of `cfg` (steps 1 and 2 of assemble_plan: generated, fitted where `cfg`
  //! is a fitted configuration, its W parts placed where it is a fine one); throws
  //! invalid_problem / invalid_schedule when refused and same_as_own for a fitted
  //! configuration without a budget. Built again where phase two needs it: keeping every
  //! configuration's schedule would hold the whole grid in memory.
  Built build(const TuneConfig<Cost>& cfg) const {
    return build(cfg, grid_.cost_of(cfg, request_.slicing));
  }
  //! build(cfg) under `cost` in place of the grid's.
  Built build(const TuneConfig<Cost>& cfg, const Cost cost) const {
    const Problem problem = problem_of(cfg);
    const PlanRecipe recipe = recipe_of(cfg);
    // A model too shallow for the stages is refused before the schedule is built (it could
    // be far larger than any the model can run): every rank holds a stage of at least one
    // layer, and a looped order ranks x chunks of them.
    if constexpr (layered_cost<Cost>) {
      const int stages = cfg.generator->chunks_vary ? cfg.ranks * cfg.chunks : cfg.ranks;
      if (stages > cost.layer_count()) {
        const Problem shape{.ranks = stages, .stages = stages, .microbatches = 1};
        const Placement none;
        if constexpr (requires { cost.check(CostContext{shape, none, 1}); })
          cost.check(CostContext{shape, none, 1});  // throws the model's own message
        throw invalid_problem("the model's " + std::to_string(cost.layer_count()) +
                              " layers cannot be split over " + std::to_string(stages) +
                              " stages; every stage needs at least one layer.");
      }
    }
    const Schedule own = generate_own(*cfg.generator, problem, recipe, cost);
    const TuneScenario<Cost>& sc = scenarios_[cfg.scenario];
    const MemoryBudget budget =
        sc.budget ? *sc.budget : default_memory_budget(cost, own.problem, own.placement);
    // An order with a memory knob (Zero Bubble's capped W deferral, slice-pipe's warm-up)
    // is searched twice: as it is, and fitted to the budget before checkpointing (what it
    // cannot fit, checkpointing brings down below). Neither dominates: a fitted base may
    // need no recompute, the order's own may leave Mario more bubble to hide recomputes in.
    if (cfg.fitted && !budget.limited()) throw same_as_own{};
    if (cfg.offloaded && !budget.limited()) throw same_as_own{};
    AssembledPlan<Cost> a =
        assemble_base(*cfg.generator, problem, cost, budget, recipe, cfg.fitted, &own);
    if (cfg.offloaded) {
      // Offloaded where the budget asks (assemble_plan's step 3); a base within its budget
      // offloads nothing and is its configuration without offloading.
      a.schedule = apply_offload(a.schedule, a.cost, a.budget);
      if (a.schedule.count(OpKind::Offload) == 0) throw same_as_own{};
    }
    return Built{std::move(a.cost), std::move(a.budget), std::move(a.schedule)};
  }

  //! Builds and simulates the base of the configuration at `index` into `b` and `sim`; false,
  //! with its candidates settled (pruned, or refused with a note), where it is refused.
  bool build_base(std::size_t index, std::optional<Built>& b, SimulationResult& sim) {
    TuneConfig<Cost>& cfg = grid_.configs[index];
    try {
      b.emplace(build(cfg));
      sim = simulate(b->base, b->cost);
      if (sim.deadlock)
        throw invalid_problem("the base schedule deadlocks: " + sim.deadlock_report);
      return true;
    } catch (const same_as_own&) {
      cfg.refused = true;
      board_.settle(space_.modes, Settled::Pruned);
    } catch (const invalid_problem& e) {
      cfg.refused = true;
      board_.refuse(index, cfg.label(), e.message(), space_.modes);
    } catch (const invalid_schedule& e) {
      cfg.refused = true;
      board_.refuse(index, cfg.label(), e.message(), space_.modes);
    }
    return false;
  }

  //! Full checkpointing (late and early) of a built base: settles those candidates and learns
  //! whether it fits. It holds the least any checkpointing of this order can: where it does
  //! not fit, neither does selective nor Mario, so it is simulated whenever the base is over.
  //! False, with what is left unsettled, where the search was stopped before a simulation.
  bool settle_full(std::size_t index, const Built& b) {
    TuneConfig<Cost>& cfg = grid_.configs[index];
    const bool need_full =
        space_.want_full || space_.want_full_early || space_.fallback_full || !cfg.base_fits;
    if (need_full) {
      const Schedule full = without_offload_of_recomputed(checkpoint_full(b.base));
      if (stop_.stop_requested()) return false;
      const SimulationResult full_sim = simulate(full, b.cost);
      cfg.full_fits = !full_sim.deadlock && fits_budget(peaks_of(full_sim), b.budget);
      if (space_.want_full || space_.fallback_full) {
        if (cfg.full_fits)
          board_.keep(make_plan(cfg, index, CheckpointMode::Full, b, full, full_sim),
                      cfg.generator);
        else if (full_sim.deadlock)
          board_.settle(1, Settled::OverBudget);
        else
          board_.over_budget(point(cfg, index, CheckpointMode::Full, b, full, full_sim));
      }
    }
    // The early recompute holds what the late one holds (the same list, the same units).
    if (space_.want_full_early) {
      if (cfg.full_fits) {
        const Schedule early =
            without_offload_of_recomputed(checkpoint_full(b.base, RecomputeTiming::Early));
        if (stop_.stop_requested()) return false;
        board_.keep(
            make_plan(cfg, index, CheckpointMode::FullEarly, b, early, simulate(early, b.cost)),
            cfg.generator);
      } else {
        board_.settle(1, Settled::OverBudget);
      }
    }
    return true;
  }

  //! Selective and Mario where phase one settles them: where the base fits, both passes would
  //! return it unchanged, so it is their plan too; where not even full checkpointing fits,
  //! they are over the budget.
  void settle_on_fitting_base(std::size_t index, const Built& b, const SimulationResult& sim) {
    const TuneConfig<Cost>& cfg = grid_.configs[index];
    if (cfg.base_fits) {
      for (CheckpointMode m :
           {CheckpointMode::Selective, CheckpointMode::SelectiveEarly, CheckpointMode::Mario}) {
        if (!space_.named(m)) continue;
        if (m == CheckpointMode::Mario && cfg.offloaded) {
          board_.settle(1, Settled::Pruned);
          continue;
        }
        if (m == CheckpointMode::Mario && !mario_applies(index)) continue;
        tuning::Plan p = make_plan(cfg, index, m, b, b.base, sim);
        p.schedule.name += std::string("+") + to_string(m);
        board_.keep(std::move(p), cfg.generator);
      }
    } else if (!cfg.full_fits) {
      board_.settle(space_.want_selective + space_.want_selective_early + space_.want_mario,
                    Settled::OverBudget);
    }
  }

  //! Mario where the base's order says it applies (GeneratorInfo::mario); elsewhere the
  //! candidate is counted as refused, with one note per base.
  bool mario_applies(std::size_t index) {
    const TuneConfig<Cost>& cfg = grid_.configs[index];
    if (cfg.generator->mario) return true;
    board_.refuse(index, cfg.cluster + std::string(cfg.generator->name),
                  "checkpoint mario does not apply to " + std::string(cfg.generator->name) +
                      " (it plans on a one-forward-one-backward rhythm: " + mario_orders_ + ")",
                  1);
    return false;
  }

  //! The figures of a candidate over the budget: its plan without the schedule kept.
  tuning::Point point(const TuneConfig<Cost>& cfg, std::size_t index, CheckpointMode mode,
                      const Built& b, const Schedule& s, const SimulationResult& sim) const {
    tuning::Plan p = make_plan(cfg, index, mode, b, s, sim, false);
    p.schedule.problem = s.problem;
    return point_of(p, false);
  }

  //! The plan of `cfg` in `mode`: schedule `s` (its base `b`, checkpointed) simulated as `sim`,
  //! with what it reports about its cluster; without `with_schedule` the schedule is left out.
  tuning::Plan make_plan(const TuneConfig<Cost>& cfg, std::size_t index, CheckpointMode mode,
                         const Built& b, const Schedule& s, const SimulationResult& sim,
                         bool with_schedule = true) const {
    const TuneScenario<Cost>& sc = scenarios_[cfg.scenario];
    // With data-parallel replicas, each stage's gradient reduction as an action right after its
    // last weight gradient (add_gradient_reduction) overlaps the rest of the rank's list; where
    // that shortens the step the plan keeps it (its memory is the same).
    if constexpr (has_reduce_seconds<Cost>) {
      bool replicas = sc.data > 1;  // a cluster scenario's, or the cost model's own degree
      if constexpr (parallel_cost<Cost>) replicas = replicas || b.cost.parallelism().data > 1;
      if (with_schedule && replicas && !s.has_gradient_reduction()) {
        const Schedule overlapped = add_gradient_reduction(s);
        const SimulationResult o = simulate(overlapped, b.cost);
        if (!o.deadlock && o.makespan < sim.makespan)
          return make_plan(cfg, index, mode, b, overlapped, o, with_schedule);
      }
    }
    tuning::Plan p;
    p.base = std::string(cfg.generator->name);
    p.chunks = cfg.chunks;
    p.microbatch_size = cfg.microbatch_size;
    p.microbatches = cfg.microbatches;
    p.checkpoint = mode;
    if (with_schedule) p.schedule = s;
    p.makespan = sim.makespan;
    p.data = sc.data;
    p.tensor = sc.tensor;
    p.zero = sc.zero;
    p.sequence_parallel = sc.sequence_parallel;
    p.gpus = cfg.ranks * sc.data * sc.tensor;
    p.global_batch = sc.global_batch * sc.data;
    p.throughput = sim.makespan > 0 ? p.global_batch / sim.makespan : 0.0;
    p.bubble_ratio = sim.bubble_ratio;
    p.peak_per_rank = peaks_of(sim);
    for (int r = 0; r < cfg.ranks; ++r)
      p.budget_per_rank.push_back(b.budget.of(r));
    p.recomputes = static_cast<int>(s.count(OpKind::R));
    p.offloads = static_cast<int>(s.count(OpKind::Offload));
    p.vocabulary = s.has_vocabulary();
    p.slices = cfg.slices;
    p.fine_wgrad = cfg.fine;
    p.fitted = cfg.fitted;
    p.wgrad = cfg.fine ? WGradMode::Split : cfg.generator->default_wgrad;
    p.warmup = warmup_of(s, 0);
    p.order = index;
    p.cost = b.cost;
    p.memory_unit = memory_unit_of(b.cost);
    for (double peak : p.peak_per_rank)
      p.peak_memory = std::max(p.peak_memory, peak);
    add_model_figures(p, cfg, b, s, sim);
    return p;
  }

  //! The figures of plan `p` its cost model's capabilities give: the largest GPU's memory with
  //! its static bytes (device_memory_cost), the layers of each stage of one replica
  //! (layered_cost) and the MFU (flop_counting_cost).
  void add_model_figures(tuning::Plan& p, const TuneConfig<Cost>& cfg, const Built& b,
                         const Schedule& s, const SimulationResult& sim) const {
    const CostContext ctx{s.problem, s.placement, 1};
    if constexpr (device_memory_cost<Cost>) {
      p.peak_memory = 0;
      for (int r = 0; r < cfg.ranks; ++r)
        p.peak_memory = std::max(p.peak_memory, b.cost.static_bytes(ctx, r) +
                                                    p.peak_per_rank[static_cast<std::size_t>(r)]);
    }
    if constexpr (layered_cost<Cost>) {
      for (int st = 0; st < s.problem.replica_stages(); ++st)
        p.layers_per_stage.push_back(b.cost.layers_of(ctx, st));
    }
    if constexpr (flop_counting_cost<Cost>) {
      if (sim.makespan > 0) {
        const double peak = p.gpus * b.cost.peak_flops() * sim.makespan;
        p.mfu = p.global_batch * b.cost.training_flops_per_sequence() / peak;
        p.mfu_usual = p.global_batch * b.cost.usual_training_flops_per_sequence() / peak;
      }
    }
    (void)cfg;
    (void)b;
    (void)sim;
    (void)ctx;
  }

  const tuning::Request& request_;
  const SearchSpace& space_;
  const std::vector<TuneScenario<Cost>>& scenarios_;
  TuneGrid<Cost>& grid_;
  Scoreboard& board_;
  StopToken stop_;            // the deadline and the caller's flag
  std::string mario_orders_;  // the generators Mario runs on, for the note
};

}  // namespace pipesched::detail
