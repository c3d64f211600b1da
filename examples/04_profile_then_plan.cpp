// Profile, then plan, for your own layers: a stage model written here (not one of pipesched's
// toy models) is profiled for one step on threads, the measured figures become a ProfiledCost,
// tune() searches the built-in schedules and a rule-based schedule of this program under a
// memory budget with that cost, and the plan it chooses is run, its loss checked against
// running the stages one after another.
//
//   example_04_profile_then_plan
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/exec/profile.hpp"
#include "pipesched/pipesched.hpp"

namespace ps = pipesched;
using std::chrono::microseconds;

namespace {

// [stage]
// The user's layer: y = tanh(W x) over the rows of a microbatch, with `work` of busy-waiting
// per call standing in for heavier kernels. Backward is split: backward_input gives dx and
// keeps what backward_weight needs for dW.
class TanhDense {
 public:
  using tensor_type = std::vector<double>;
  struct stash_type {
    std::vector<double> x, y, dz;
  };

  TanhDense(int in, int out, microseconds work)
      : in_(in), out_(out), work_(work), w_(std::size_t(in) * out), g_(w_.size()) {
    for (std::size_t i = 0; i < w_.size(); ++i)
      w_[i] = 0.3 * std::cos(1.3 * double(i) + out);
  }
  tensor_type forward(const tensor_type& x, stash_type& st) {
    spin();
    st.x = x;
    st.y.assign(x.size() / in_ * out_, 0.0);
    for (std::size_t r = 0; r < x.size() / in_; ++r)
      for (int o = 0; o < out_; ++o) {
        double z = 0;
        for (int i = 0; i < in_; ++i)
          z += w_[std::size_t(o) * in_ + i] * x[r * in_ + i];
        st.y[r * out_ + o] = std::tanh(z);
      }
    return st.y;
  }
  tensor_type backward_input(const tensor_type& dy, stash_type& st) {
    spin();
    st.dz.resize(dy.size());
    for (std::size_t k = 0; k < dy.size(); ++k)
      st.dz[k] = dy[k] * (1 - st.y[k] * st.y[k]);
    tensor_type dx(st.x.size(), 0.0);
    for (std::size_t r = 0; r < dx.size() / in_; ++r)
      for (int o = 0; o < out_; ++o)
        for (int i = 0; i < in_; ++i)
          dx[r * in_ + i] += w_[std::size_t(o) * in_ + i] * st.dz[r * out_ + o];
    st.y = {};
    return dx;
  }
  void backward_weight(stash_type& st) {
    spin();
    for (std::size_t r = 0; r < st.x.size() / in_; ++r)
      for (int o = 0; o < out_; ++o)
        for (int i = 0; i < in_; ++i)
          g_[std::size_t(o) * in_ + i] += st.dz[r * out_ + o] * st.x[r * in_ + i];
    st = {};
  }
  std::size_t stash_bytes(const stash_type& st) const {
    return sizeof(double) * (st.x.size() + st.y.size() + st.dz.size());
  }
  std::size_t input_bytes(const tensor_type& x) const { return sizeof(double) * x.size(); }
  void zero_gradients() { std::fill(g_.begin(), g_.end(), 0.0); }

 private:
  void spin() const {
    const auto until = std::chrono::steady_clock::now() + work_;
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  int in_, out_;
  microseconds work_;
  std::vector<double> w_, g_;
};
// [stage]

// A schedule of this program: backwards first, then forwards while the rank's activations
// stay within its byte cap, then deferred weight gradients.
struct CappedRule {
  std::vector<double> cap;  // bytes per rank
  int priority(const ps::RankState&, const ps::ReadyAction& a) const {
    return a.action.kind == ps::OpKind::F ? 1 : a.action.kind == ps::OpKind::W ? 2 : 0;
  }
  bool admit(const ps::RankState& st, const ps::ReadyAction& a) const {
    return a.action.kind != ps::OpKind::F || st.memory + a.memory <= cap[st.rank];
  }
};

constexpr int features = 16, rows = 4, stages_count = 4, microbatches = 8;

// Microbatch m's input and a squared-error loss against a fixed target (added into `loss`).
ps::TrainingData<std::vector<double>> make_data() {
  ps::TrainingData<std::vector<double>> d;
  d.input = [](int m, int) {
    std::vector<double> x(std::size_t(rows) * features);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = std::sin(0.37 * double(i) + m);
    return x;
  };
  d.loss = [](const std::vector<double>& y, int, int, double& loss) {
    std::vector<double> dy(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
      dy[i] = y[i] - 0.5;
      loss += 0.5 * dy[i] * dy[i];
    }
    return dy;
  };
  return d;
}

}  // namespace

int main() {
  try {
    // [profile]
    std::vector<TanhDense> stages;
    for (int s = 0; s < stages_count; ++s)  // the last stage does twice the work
      stages.emplace_back(features, features, microseconds(s + 1 == stages_count ? 400 : 200));
    const ps::TrainingData<std::vector<double>> data = make_data();
    const ps::ProfiledCost cost = ps::profile(stages, data);  // seconds and bytes, per stage
    // [profile]
    std::printf("profiled: F %.0f/%.0f us (stage 0 / last), activations %.0f B per microbatch\n",
                1e6 * cost.stages.front().forward, 1e6 * cost.stages.back().forward,
                cost.stages.front().activation_bytes);

    // [tune]
    const ps::Problem problem{.ranks = stages_count, .microbatches = microbatches};
    // Budget: what 1F1B holds on each rank, under the measured cost.
    const ps::SimulationResult one_f_one_b =
        ps::simulate(ps::plan<ps::order::OneFOneB>::generate(problem), cost);
    ps::MemoryBudget budget;
    for (const ps::RankSummary& r : one_f_one_b.ranks)
      budget.per_rank.push_back(r.peak_memory);
    // The rule as a run-time generator: it plans with the measured cost and caps each rank at
    // its budget.
    ps::register_generator(ps::GeneratorInfo{
        .name = "capped-ahead",
        .summary = "backwards first, forwards within each rank's byte budget, W deferred",
        .placement = ps::PlacementKind::Linear,
        .default_chunks = 1,
        .chunks_vary = false,
        .fused = true,
        .split = true,
        .default_wgrad = ps::WGradMode::Split,
        .generate = [&](ps::Problem p, ps::WGradMode w) {
          return ps::list_schedule({.problem = p,
                                    .placement = ps::Placement::linear(p.ranks),
                                    .wgrad = w,
                                    .name = "capped-ahead"},
                                   CappedRule{budget.per_rank}, cost);
        }});
    ps::tuning::Request request;
    request.ranks = stages_count;
    request.global_batch = microbatches;
    request.bases = {"1f1b", "zb-h1", "zb-h2", "capped-ahead"};
    request.checkpoints = {ps::CheckpointMode::None, ps::CheckpointMode::Selective};
    request.budget = budget;
    const ps::tuning::Result result = ps::tune(request, [&](int microbatch_size) {
      if (microbatch_size != 1) throw ps::invalid_problem("profiled for microbatch size 1 only");
      return cost;
    });
    // [tune]
    if (!result.best) {
      std::fprintf(stderr, "example_04_profile_then_plan: no plan fits the budget\n");
      return 1;
    }
    const ps::tuning::Plan& best = *result.best;
    std::printf("searched %d candidates in %.2f s; best: %s, step %.2f ms predicted (1F1B %.2f)\n",
                result.candidates_tried, result.seconds, best.schedule.name.c_str(),
                1e3 * best.makespan, 1e3 * one_f_one_b.makespan);

    // [run]
    ps::inproc::Pipeline<TanhDense> pipe(best.schedule, stages);
    const ps::StepResult step = pipe.step(data);
    // [run]
    // The same microbatches through the stages one after another.
    double want = 0;
    for (int m = 0; m < microbatches; ++m) {
      std::vector<double> x = data.input(m, 0);
      for (TanhDense& s : stages) {
        TanhDense::stash_type st;
        x = s.forward(x, st);
      }
      double loss = 0;
      (void)data.loss(x, m, 0, loss);
      want += loss;
    }
    std::printf("ran it: loss %.12f (sequential %.12f), %.2f ms measured\n", step.loss, want,
                1e3 * step.seconds);
    for (std::size_t r = 0; r < step.ranks.size(); ++r)
      if (step.ranks[r].peak_bytes > budget.of(int(r)) + 1e-9) {
        std::fprintf(stderr, "rank %zu held %.0f B, over its budget %.0f B\n", r,
                     step.ranks[r].peak_bytes, budget.of(int(r)));
        return 1;
      }
    return std::abs(step.loss - want) <= 1e-12 * std::abs(want) ? 0 : 1;
  } catch (const ps::error& e) {
    std::fprintf(stderr, "example_04_profile_then_plan: %s\n", e.what());
    return 1;
  }
}
