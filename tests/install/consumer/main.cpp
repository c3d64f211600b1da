// Builds a 1F1B schedule through an installed pipesched and checks its size, that the
// installed headers have the package's version, and that a refined order, a user's own order
// (a list-scheduling rule) and a user's own checkpoint policy reach plan<>, the tuner and the
// executor without touching a library header.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "pipesched/pipesched.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/version.hpp"

namespace ps = pipesched;

// A refined built-in: inherits 1F1B's facts and generator.
struct MyOneFOneB : ps::order::OneFOneB {};

// The consumer's own order: forwards first, but at most two in flight on any rank.
struct TwoInFlight {
  int priority(const ps::RankState&, const ps::ReadyAction& a) const {
    return a.action.kind == ps::OpKind::F ? 0 : 1;
  }
  bool admit(const ps::RankState& st, const ps::ReadyAction& a) const {
    return a.action.kind != ps::OpKind::F || st.in_flight() < 2;
  }
};
struct TwoInFlightOrder : ps::order::Custom {
  static constexpr std::string_view name = "two-in-flight";
  static ps::Schedule generate(ps::Problem p, ps::WGradMode w) {
    return ps::list_schedule(
        {.problem = p, .placement = ps::Placement::linear(p.ranks), .wgrad = w, .name = "two"},
        TwoInFlight{});
  }
};

int orders() {
  const ps::Problem p{.ranks = 4, .microbatches = 8};
  const ps::Schedule refined = ps::plan<MyOneFOneB>::generate(p);
  const ps::Schedule own = ps::plan<TwoInFlightOrder>::generate(p);
  const ps::ValidationReport report = ps::check(own);
  const ps::SimulationResult sim = ps::simulate(own);
  int most = 0;
  for (const ps::RankSummary& r : sim.ranks)
    most = r.peak_memory > most ? int(r.peak_memory) : most;
  if (refined.ranks != ps::plan<ps::order::OneFOneB>::generate(p).ranks || !report.ok() ||
      sim.deadlock || most > 2) {
    std::fprintf(stderr,
                 "pipesched consumer: custom orders: refined equal %d, own valid %d, "
                 "peak %d (want at most 2)\n",
                 int(refined.ranks == ps::plan<ps::order::OneFOneB>::generate(p).ranks),
                 int(report.ok()), most);
    return 1;
  }
  std::printf(
      "pipesched consumer: plan<MyOneFOneB> = 1F1B; plan<TwoInFlightOrder> valid, "
      "makespan %.1f, peak %d\n",
      sim.makespan, most);
  return 0;
}

// The consumer's own checkpoint policy: recompute the last microbatch of every stage.
struct LastMicrobatch : ps::checkpoint::Custom {
  static constexpr std::string_view name = "last-microbatch";
  static constexpr std::string_view summary = "recompute each stage's last microbatch";
  template <ps::cost_model Cost>
  static ps::Schedule apply(const ps::Schedule& s, const Cost&, const ps::MemoryBudget&) {
    const int last = s.problem.microbatches - 1;
    return ps::with_recomputes(s, [last](int, int m, int) { return m == last; });
  }
};

// Trains one step of `s` on the toy MLP in threads and compares its loss with the sequential
// reference's; false (with a message) when they differ.
bool trains(const ps::Schedule& s, const char* what) {
  namespace toy = ps::toy;
  using Stage = toy::MlpStage<double>;
  const toy::MlpConfig config{.blocks = 4};
  const auto data = toy::make_mlp_data<double>(config, s.problem.microbatches, 5);
  std::vector<Stage> ref, piped;
  for (int st = 0; st < s.problem.stages; ++st) {
    ref.emplace_back(config, st, s.problem.stages);
    piped.emplace_back(config, st, s.problem.stages);
  }
  const double want = toy::sequential_step(ref, data);
  ps::inproc::Pipeline<Stage> pipe(s, piped);
  const double got = pipe.step(toy::training_data(data)).loss;
  if (std::abs(got - want) > 1e-12 * std::abs(want)) {
    std::fprintf(stderr, "pipesched consumer: %s trained to loss %.17g, sequential %.17g\n",
                 what, got, want);
    return false;
  }
  return true;
}

// The consumer's order and checkpoint policy, registered, through the tuner and the executor.
int own_policies() {
  ps::register_order<TwoInFlightOrder>();
  ps::register_checkpoint<LastMicrobatch>();
  const ps::Problem p{.ranks = 2, .microbatches = 4};
  const ps::Schedule planned = ps::plan<TwoInFlightOrder, LastMicrobatch>::generate(p);
  int recomputes = 0;
  for (const auto& list : planned.ranks)
    for (const ps::Action& a : list)
      recomputes += a.kind == ps::OpKind::R;
  ps::tuning::Request req{.ranks = 2, .global_batch = 4};
  req.bases = {"two-in-flight", "1f1b"};
  req.checkpoints = {ps::CheckpointMode::None};
  req.checkpoint_policies = {"last-microbatch"};
  const ps::tuning::Result r = ps::tune(req, ps::UniformCost{});
  const ps::tuning::Baseline* own = r.baseline("two-in-flight", "last-microbatch");
  if (!ps::check(planned).ok() || recomputes != 2 || !own || !own->plan) {
    std::fprintf(stderr,
                 "pipesched consumer: own policy: valid %d, %d recomputes (want 2), tuned %d\n",
                 int(ps::check(planned).ok()), recomputes, int(own && own->plan));
    return 1;
  }
  if (!trains(planned, "plan<TwoInFlightOrder, LastMicrobatch>") ||
      !trains(own->plan->schedule, "the tuner's two-in-flight + last-microbatch plan"))
    return 1;
  std::printf(
      "pipesched consumer: plan<TwoInFlightOrder, LastMicrobatch> valid, %d recomputes; tuned "
      "(%s) and trained to the sequential loss\n",
      recomputes, ps::describe(*own->plan).c_str());
  return 0;
}

int main() {
  if (std::strcmp(pipesched::version_string, PIPESCHED_CONSUMER_PACKAGE_VERSION) != 0) {
    std::fprintf(stderr, "pipesched consumer: headers say version %s, the CMake package %s\n",
                 pipesched::version_string, PIPESCHED_CONSUMER_PACKAGE_VERSION);
    return 1;
  }
  using Plan = pipesched::plan<pipesched::order::OneFOneB, pipesched::wgrad::Fused>;
  const pipesched::Schedule s = Plan::generate(pipesched::Problem{.ranks = 4, .microbatches = 8});
  // One forward and one backward per stage and microbatch: 2 × 4 × 8.
  const std::size_t expected = 2 * 4 * 8;
  if (s.action_count() != expected || s.rank_count() != 4) {
    std::fprintf(stderr, "pipesched consumer: %s has %zu actions on %d ranks; expected %zu on 4\n",
                 s.name.c_str(), s.action_count(), s.rank_count(), expected);
    return 1;
  }
  std::printf("pipesched consumer: pipesched %s, %s, %zu actions on %d ranks\n",
              pipesched::version_string, s.name.c_str(), s.action_count(), s.rank_count());
  if (const int bad = orders()) return bad;
  return own_policies();
}
