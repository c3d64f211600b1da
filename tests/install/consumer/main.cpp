// Builds a 1F1B schedule through an installed pipesched and checks its size, that the
// installed headers have the package's version, and that a refined order and a user's own
// order (a list-scheduling rule) reach plan<> without touching a library header.
#include <cstdio>
#include <cstring>

#include "pipesched/pipesched.hpp"
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
  return orders();
}
