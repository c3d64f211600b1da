// One set of rules (core/rules.hpp, memory_effect): the list-scheduling engine, the validator's
// graph, the simulator and the checkpointing passes must agree on it. On a randomized grid of
// problems (ranks, chunks, microbatches, slices, replicas, fused or split backward), costs and
// orders (a random key per action), the engine plans a schedule; the simulator's times and
// peaks must be the engine's, the graph's edges the rules', and the passes' memory walks the
// simulator's peaks. Lowered to sends and receives (the messages of for_each_message), with and
// without a send budget and with late recomputes, every schedule must validate, and every
// fourth, run on threads with toy GPT stages, must train as the sequential model does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipesched/analysis/detail/graph.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/core/rules.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/schedule/list_schedule.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"

namespace test_rules {

namespace ps = pipesched;

namespace {

using Unit = std::tuple<int, int, int, int>;  // role, stage, microbatch, slice

Unit unit_of(ps::Role role, int s, int m, int k) {
  return {static_cast<int>(role), s, m, k};
}

// Any order the rules allow: a key drawn per action from the seed, and a record of when the
// engine started each action of each rank (the `now` of the decision that picked it).
struct RandomOrder {
  std::uint64_t seed;
  mutable std::map<std::pair<int, std::size_t>, double>* starts;
  std::uint64_t priority(const ps::RankState& st, const ps::ReadyAction& a) const {
    (*starts)[{st.rank, st.started.size()}] = st.now;
    std::uint64_t h = seed ^ (static_cast<std::uint64_t>(a.action.stage) * 0x9e3779b97f4a7c15ull);
    h ^= static_cast<std::uint64_t>(a.action.microbatch) * 0xc2b2ae3d27d4eb4full;
    h ^= static_cast<std::uint64_t>(a.action.slice) * 0x165667b19e3779f9ull;
    h ^= static_cast<std::uint64_t>(a.action.kind) * 0x27d4eb2f165667c5ull;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 29);
  }
};

struct Case {
  ps::ListProblem lp;
  ps::UniformCost cost;
  std::uint64_t seed;
};

Case random_case(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Case c;
  const int ranks = pick(1, 4);
  const int replicas = pick(0, 3) == 0 ? 2 : 1;
  const int chunks = replicas == 2 ? 2 : pick(1, 3);
  c.lp.problem.ranks = ranks;
  c.lp.problem.stages = ranks * chunks;
  c.lp.problem.replicas = replicas;
  c.lp.problem.microbatches = pick(1, 6);
  c.lp.problem.slices = pick(1, 3);
  c.lp.placement = chunks % 2 == 0 && (replicas == 2 || pick(0, 1) == 0)
                       ? ps::Placement::v_shape(ranks, chunks)
                       : ps::Placement::interleaved(ranks, chunks);
  c.lp.wgrad = pick(0, 1) ? ps::WGradMode::Split : ps::WGradMode::Fused;
  std::uniform_real_distribution<double> time(0.25, 3.0);
  c.cost.f = time(rng);
  c.cost.b = c.cost.f + time(rng);
  c.cost.w = std::min(c.cost.b * 0.5, time(rng));
  c.cost.r = time(rng);
  c.cost.comm = pick(0, 1) ? 0.0 : time(rng) * 0.3;
  c.cost.w_memory = pick(0, 1) ? 0.0 : 0.25;
  c.seed = rng();
  return c;
}

// A small GPT: a block per stage of the largest random problem (12), sequences that 1 to 3
// slices cut.
const ps::toy::GptConfig toy_gpt{
    .hidden = 4, .ffn = 8, .sequence = 6, .blocks = 12, .microbatch_size = 1};

// Runs one step of `s` (lowered: it runs as written) on threads, with toy GPT stages (each
// replica a copy of the model, its stage q·S/R + j the model's stage j), and expects the loss
// and, after the replicas' gradients are summed, every replica's gradients to be those of
// sequential training of the whole model.
void expect_trains_as_sequential(const ps::Schedule& s) {
  namespace toy = ps::toy;
  const ps::Problem& p = s.problem;
  const int model_stages = p.replica_stages();
  const auto data = toy::make_gpt_data<double>(toy_gpt, p.microbatches, 5);
  std::vector<toy::GptStage<double>> whole;
  whole.emplace_back(toy_gpt, 0, 1);
  const double ref_loss = toy::sequential_step(whole, data);
  const auto ref_grads = toy::flat_gradients(whole);
  std::vector<toy::GptStage<double>> piped;
  for (int st = 0; st < p.stages; ++st)
    piped.emplace_back(toy_gpt, st % model_stages, model_stages);
  ps::inproc::Pipeline<toy::GptStage<double>> pipe(s, piped);
  const ps::StepResult r = pipe.step(toy::training_data(data, p.slices));
  EXPECT_NEAR(r.loss, ref_loss, 1e-12 * std::abs(ref_loss));
  toy::sum_replica_gradients(piped, p.replicas);
  for (int q = 0; q < p.replicas; ++q)
    EXPECT_LE(toy::max_relative_error(toy::flat_replica_gradients(piped, p.replicas, q), ref_grads),
              1e-12)
        << "replica " << q;
}

// Every action's dependencies, as the rules give them, read back from the dependents of the
// producers: the two directions must be one relation.
TEST(Rules, DependentsAreTheInverseOfDependencies) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    Case c = random_case(rng);
    const ps::Problem& p = c.lp.problem;
    std::set<std::pair<Unit, Unit>> forward, backward;  // (consumer, producer)
    const ps::OpKind kinds[] = {ps::OpKind::F, ps::OpKind::I,       ps::OpKind::W,
                                ps::OpKind::R, ps::OpKind::Offload, ps::OpKind::Reload};
    for (int s = 0; s < p.stages; ++s)
      for (int m = 0; m < p.microbatches; ++m)
        for (int k = 0; k < p.slices; ++k)
          for (ps::OpKind kind : kinds)
            for (bool late : {false, true}) {
              if (late && kind != ps::OpKind::R) continue;
              ps::Action a = ps::Action::make(kind, s, m, k);
              a.late = late;
              ps::Role role{};
              ASSERT_TRUE(ps::role_of(a, role));
              ps::for_each_dependency(p, a, [&](const ps::Dependency& d) {
                EXPECT_GE(d.stage, 0);
                EXPECT_LT(d.stage, p.stages);
                EXPECT_GE(d.slice, 0);
                EXPECT_LT(d.slice, p.slices);
                EXPECT_EQ(p.replica_of_stage(d.stage), p.replica_of_stage(s));
                forward.insert({unit_of(role, s, m, k), unit_of(d.role, d.stage, m, d.slice)});
              });
              // As a producer, an R stands for both recompute roles (the Recompute rules).
              ps::for_each_dependent(p, a, [&](const ps::Dependency& d) {
                const ps::Role as = role == ps::Role::LateRecompute ? ps::Role::Recompute : role;
                backward.insert({unit_of(d.role, d.stage, m, d.slice), unit_of(as, s, m, k)});
              });
            }
    EXPECT_EQ(forward, backward) << "trial " << trial;
  }
}

TEST(Rules, EngineSimulatorGraphAndPassesAgree) {
  std::mt19937_64 rng(2026);
  int schedules = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Case c = random_case(rng);
    std::map<std::pair<int, std::size_t>, double> starts;
    const ps::ListPlan plan = ps::list_schedule_plan(c.lp, RandomOrder{c.seed, &starts}, c.cost);
    const ps::Schedule& s = plan.schedule;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": ranks " + std::to_string(s.rank_count()) +
                 ", stages " + std::to_string(s.problem.stages) + ", microbatches " +
                 std::to_string(s.problem.microbatches) + ", slices " +
                 std::to_string(s.problem.slices) + ", replicas " +
                 std::to_string(s.problem.replicas));
    ASSERT_TRUE(ps::check(s).ok()) << ps::check(s).summary();
    ++schedules;

    // The simulator times every action where the engine started it, and peaks where it did.
    const ps::SimulationResult sim = ps::simulate(s, c.cost);
    ASSERT_FALSE(sim.deadlock);
    for (int r = 0; r < s.rank_count(); ++r) {
      const auto& list = s.ranks[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < list.size(); ++i) {
        auto it = starts.find({r, i});
        ASSERT_NE(it, starts.end());
        EXPECT_NEAR(sim.timing[static_cast<std::size_t>(r)][i].start, it->second, 1e-9)
            << ps::to_string(list[i]) << " on rank " << r;
      }
      EXPECT_NEAR(sim.ranks[static_cast<std::size_t>(r)].peak_memory,
                  plan.peak_memory[static_cast<std::size_t>(r)], 1e-9);
    }
    EXPECT_NEAR(sim.makespan, plan.makespan, 1e-9);

    // The graph's edges of every compute action are the rules'.
    const ps::detail::DependencyGraph g(s);
    ASSERT_TRUE(g.issues().empty());
    for (int id = 0; id < g.size(); ++id) {
      const ps::Action& a = g.action(id);
      std::set<int> want;
      ps::for_each_dependency(s.problem, a, [&](const ps::Dependency& d) {
        const int p = d.role == ps::Role::Forward ? g.forward_of(d.stage, d.microbatch, d.slice)
                      : d.role == ps::Role::Backward
                          ? g.input_backward_of(d.stage, d.microbatch, d.slice)
                          : g.recompute_of(d.stage, d.microbatch, d.slice);
        if (p != ps::detail::DependencyGraph::none) want.insert(p);
      });
      const auto deps = g.deps(id);
      EXPECT_EQ(std::set<int>(deps.begin(), deps.end()), want) << ps::to_string(a);
    }

    // Lowered to sends and receives, with waits or without, under a budget of one outstanding
    // send or of none, the schedule validates, and its dry run does not deadlock.
    auto expect_lowers = [&](const ps::Schedule& compute, const std::string& what) {
      for (ps::LowerOptions o : {ps::LowerOptions{}, ps::LowerOptions{.wait_sends = false},
                                 ps::LowerOptions{.max_outstanding_sends = 1}}) {
        SCOPED_TRACE(what + ", wait_sends " + std::to_string(o.wait_sends) +
                     ", max_outstanding_sends " + std::to_string(o.max_outstanding_sends));
        const ps::Schedule lowered = ps::lower_communication(compute, o);
        ASSERT_EQ(lowered.has_comm(), s.rank_count() > 1);
        const ps::ValidationReport rep = ps::check(lowered);
        ASSERT_TRUE(rep.ok()) << rep.summary();
        ASSERT_FALSE(ps::simulate(lowered, c.cost).deadlock);
      }
    };
    expect_lowers(s, "lowered");

    // Checkpointed, the passes' memory walk and the simulator agree rank by rank: full (late and
    // early recomputes) and selective under a budget between the two extremes.
    for (auto timing : {ps::RecomputeTiming::Late, ps::RecomputeTiming::Early}) {
      const ps::Schedule full = ps::checkpoint_full(s, timing);
      ASSERT_TRUE(ps::check(full).ok()) << ps::check(full).summary();
      // A late recompute receives the gradient before its backward: lowered, it still validates.
      expect_lowers(full, "checkpointed");
      // Run on threads, the lowered schedule (recomputes, late ones receiving the gradient,
      // included) trains as the sequential model does.
      if (trial % 4 == 0) {
        SCOPED_TRACE("run on threads");
        expect_trains_as_sequential(ps::lower_communication(full));
      }
      const ps::SimulationResult fs = ps::simulate(full, c.cost);
      ASSERT_FALSE(fs.deadlock);
      const std::vector<double> peaks = ps::detail::rank_peaks(full, c.cost);
      for (int r = 0; r < s.rank_count(); ++r)
        EXPECT_NEAR(peaks[static_cast<std::size_t>(r)],
                    fs.ranks[static_cast<std::size_t>(r)].peak_memory, 1e-9);
      ps::MemoryBudget budget;
      budget.all = 0.5 * (fs.peak_memory_max + sim.peak_memory_max);
      if (budget.all < fs.peak_memory_max) budget.all = fs.peak_memory_max;
      const ps::Schedule sel = ps::checkpoint_selective(s, c.cost, budget, nullptr, timing);
      const ps::SimulationResult ss = ps::simulate(sel, c.cost);
      ASSERT_FALSE(ss.deadlock);
      const std::vector<double> sel_peaks = ps::detail::rank_peaks(sel, c.cost);
      for (int r = 0; r < s.rank_count(); ++r) {
        const double simulated = ss.ranks[static_cast<std::size_t>(r)].peak_memory;
        EXPECT_NEAR(sel_peaks[static_cast<std::size_t>(r)], simulated, 1e-9);
        EXPECT_LE(simulated, budget.all + 1e-9);
      }
    }
  }
  EXPECT_EQ(schedules, 300);
}

}  // namespace

}  // namespace test_rules
