// A new schedule written as a rule: 1F1B whose ranks may run ahead while they hold fewer than
// N microbatches' activations, with weight gradients split off and deferred into the waits.
// It is validated, simulated beside 1F1B, drawn to an SVG file, and trains the toy GPT on
// threads with the same losses as sequential training.
//
//   example_03_custom_schedule [--svg FILE]   (default: custom_schedule.svg)
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "pipesched/pipesched.hpp"
#include "pipesched/toy/data.hpp"
#include "pipesched/toy/gpt.hpp"
#include "pipesched/toy/reference.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"

namespace ps = pipesched;

// [rule]
// Which ready action a free rank runs first, and which it may not start yet.
struct RunAheadRule {
  double held_limit;  // microbatches' activations a rank may hold (UniformCost's unit)
  // Input gradients first (they unblock the rank before), then forwards, then deferred W.
  int priority(const ps::RankState&, const ps::ReadyAction& a) const {
    return a.action.kind == ps::OpKind::F ? 1 : a.action.kind == ps::OpKind::W ? 2 : 0;
  }
  // A forward only while its activations fit under the limit.
  bool admit(const ps::RankState& st, const ps::ReadyAction& a) const {
    return a.action.kind != ps::OpKind::F || st.memory + a.memory <= held_limit + 1e-9;
  }
};

// The rule as an order policy: plan<RunAhead<N>> validates, checkpoints and lowers it like
// a built-in, and register_order<RunAhead<N>>() lets the tuner search it.
template <int N>
struct RunAhead : ps::order::Custom {
  static constexpr std::string_view name = "run-ahead";
  static constexpr std::string_view summary = "1F1B running ahead within N microbatches";
  using default_wgrad = ps::wgrad::Split;
  static ps::Schedule generate(ps::Problem p, ps::WGradMode w) {
    return ps::list_schedule({.problem = p,
                              .placement = ps::Placement::linear(p.ranks),
                              .wgrad = w,
                              .name = "run-ahead"},
                             RunAheadRule{double(N)});
  }
};
// [rule]

int main(int argc, char** argv) {
  std::string svg_path = "custom_schedule.svg";
  if (argc == 3 && std::string(argv[1]) == "--svg") {
    svg_path = argv[2];
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: example_03_custom_schedule [--svg FILE]\n");
    return 2;
  }
  try {
    // [plan]
    const ps::Problem problem{.ranks = 4, .microbatches = 8};
    const ps::Schedule mine = ps::plan<RunAhead<5>>::generate(problem);
    ps::validate(mine);  // throws invalid_schedule naming the rank, position and rule
    const ps::UniformCost cost{.f = 1, .b = 2, .w = 1};
    const ps::SimulationResult ours = ps::simulate(mine, cost);
    const ps::SimulationResult base =
        ps::simulate(ps::plan<ps::order::OneFOneB>::generate(problem), cost);
    std::printf(
        "run-ahead: makespan %.1f, peak %.2f microbatches; 1F1B: makespan %.1f, peak %.2f\n",
        ours.makespan, ours.peak_memory_max, base.makespan, base.peak_memory_max);
    std::ofstream(svg_path) << ps::render_svg(mine, ours);
    // [plan]
    if (!(ours.makespan < base.makespan) || ours.peak_memory_max > 5 + 1e-9) {
      std::fprintf(stderr, "run-ahead should be faster than 1F1B within 5 microbatches\n");
      return 1;
    }

    // [train]
    using Stage = ps::toy::GptStage<double>;
    const ps::toy::GptConfig config{.vocabulary = 32,
                                    .hidden = 16,
                                    .heads = 2,
                                    .ffn = 32,
                                    .sequence = 8,
                                    .blocks = problem.ranks,
                                    .microbatch_size = 2,
                                    .seed = 3};
    std::vector<Stage> stages, reference;
    for (int s = 0; s < problem.ranks; ++s) {
      stages.emplace_back(config, s, problem.ranks);
      reference.emplace_back(config, s, problem.ranks);
    }
    ps::ExecutorOptions options;
    ps::toy::use_sgd(options, mine.placement, stages, 0.1);
    ps::inproc::Pipeline<Stage> pipe(mine, stages, options);
    const auto data = ps::toy::make_gpt_data<double>(config, problem.microbatches, 11);
    for (int step = 0; step < 3; ++step) {
      const double want = ps::toy::sequential_step(reference, data);
      ps::toy::sgd_update(reference, 0.1);
      const double got = pipe.step(ps::toy::training_data(data, 1)).loss;
      std::printf("step %d: loss %.12f, sequential %.12f\n", step, got, want);
      if (!(std::abs(got - want) <= 1e-12 * std::abs(want))) return 1;
    }
    // [train]
    const double err = ps::toy::max_relative_error(ps::toy::flat_parameters(stages),
                                                   ps::toy::flat_parameters(reference));
    std::printf("parameters after 3 steps: relative difference %.3g; SVG in %s\n", err,
                svg_path.c_str());
    return err <= 1e-12 ? 0 : 1;
  } catch (const ps::error& e) {
    std::fprintf(stderr, "example_03_custom_schedule: %s\n", e.what());
    return 1;
  }
}
