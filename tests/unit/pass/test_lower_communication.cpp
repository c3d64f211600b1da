// Communication lowering over every generator and grid point: the lowered schedule
// validates (its receives wait for matching sends in the dry run), has one send, one receive
// and one send wait per cross-rank dependency, keeps the compute actions in their order, and
// keeps the rules PyTorch 2.15's runtime needs (checked here independently of the validator):
// every send has its wait, and every channel delivers in order.
#include <gtest/gtest.h>

#include <iostream>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/action_string.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/pass/reduce_gradients.hpp"
#include "pipesched/policy/registry.hpp"
#include "pytorch_style_lowering.hpp"

namespace test_lower_communication {

namespace ps = pipesched;

namespace {

// Cross-rank edges of a compute-only schedule: forward hand-offs s -> s+1 and gradient
// hand-offs s -> s-1 whose stages sit on different ranks, per microbatch and slice.
std::size_t cross_rank_edges(const ps::Schedule& s) {
  // Per microbatch, the edges of the stages it runs through (all of them, or its replica's).
  std::size_t n = 0;
  for (int mb = 0; mb < s.problem.microbatches; ++mb)
    for (int st = 0; st + 1 < s.problem.stages; ++st)
      if (s.problem.has_unit(st, mb) && !s.problem.last_stage(st) &&
          s.placement.rank_of(st) != s.placement.rank_of(st + 1))
        ++n;
  return 2 * n * s.problem.slices;
}

// The rules PyTorch 2.15 checks before it runs a lowered schedule, and the one its runtime
// relies on without checking, written out on their own: (1) every send has exactly one wait
// of the same kind and unit later on its rank, and no wait lacks its send; (2) every compute
// action's cross-rank input has a receive earlier on its rank; (3) per channel (sender rank ->
// receiver rank), the receives come in the order of the sends. The first broken rule, or
// nothing.
std::optional<std::string> pytorch_rule_broken(const ps::Schedule& s) {
  using ps::OpKind;
  using Unit = std::tuple<int, int, int, int>;  // kind, stage, microbatch, slice
  const int n = s.rank_count();
  auto rank_of = [&](int st) { return s.placement.rank_of(st); };
  std::map<std::pair<int, int>, std::vector<Unit>> sends, recvs;  // channel -> messages
  for (int r = 0; r < n; ++r) {
    std::map<Unit, int> open;  // sends without their wait yet
    std::map<Unit, int> received;
    for (const ps::Action& a : s.ranks[r]) {
      const Unit u{0, a.stage, a.microbatch, a.slice};
      auto with = [&](OpKind k) {
        return Unit{static_cast<int>(k), a.stage, a.microbatch, a.slice};
      };
      switch (a.kind) {
        case OpKind::SendF:
        case OpKind::SendB: {
          const bool f = a.kind == OpKind::SendF;
          ++open[with(a.kind)];
          sends[{r, rank_of(f ? a.stage + 1 : a.stage - 1)}].push_back(
              {f, a.stage, a.microbatch, a.slice});
          break;
        }
        case OpKind::WaitSendF:
        case OpKind::WaitSendB: {
          auto it = open.find(with(ps::send_of_wait(a.kind)));
          if (it == open.end() || it->second == 0)
            return "rank " + std::to_string(r) + ": " + ps::to_string(a) + " waits for no send";
          --it->second;
          break;
        }
        case OpKind::RecvF:
        case OpKind::RecvB: {
          const bool f = a.kind == OpKind::RecvF;
          const int producer = f ? a.stage - 1 : a.stage + 1;
          ++received[with(a.kind)];
          recvs[{rank_of(producer), r}].push_back({f, producer, a.microbatch, a.slice});
          break;
        }
        default: {
          auto needs = [&](const ps::Action& c) -> std::optional<std::string> {
            auto have = [&](OpKind k) {
              return received.count({static_cast<int>(k), c.stage, c.microbatch, c.slice}) > 0;
            };
            if (c.kind == OpKind::F && c.stage > 0 && rank_of(c.stage - 1) != r &&
                !have(OpKind::RecvF))
              return "rank " + std::to_string(r) + ": " + ps::to_string(c) + " before its RECV_F";
            if (ps::is_input_backward(c.kind) && c.stage + 1 < s.problem.stages &&
                rank_of(c.stage + 1) != r && !have(OpKind::RecvB))
              return "rank " + std::to_string(r) + ": " + ps::to_string(c) + " before its RECV_B";
            return std::nullopt;
          };
          if (a.kind == OpKind::Overlap) {
            if (auto e = needs(a.forward_half())) return e;
            if (auto e = needs(a.backward_half())) return e;
          } else if (auto e = needs(a)) {
            return e;
          }
        }
      }
      (void)u;
    }
    for (const auto& [unit, left] : open)
      if (left != 0)
        return "rank " + std::to_string(r) + ": a send of stage " +
               std::to_string(std::get<1>(unit)) + " microbatch " +
               std::to_string(std::get<2>(unit)) + " has no wait";
  }
  for (const auto& [channel, sent] : sends) {
    const auto& got = recvs[channel];
    if (got.size() != sent.size())
      return "channel " + std::to_string(channel.first) + "->" + std::to_string(channel.second) +
             ": " + std::to_string(sent.size()) + " sends, " + std::to_string(got.size()) +
             " receives";
    for (std::size_t i = 0; i < sent.size(); ++i)
      if (sent[i] != got[i])
        return "channel " + std::to_string(channel.first) + "->" + std::to_string(channel.second) +
               ": message " + std::to_string(i) + " is received out of order";
  }
  return std::nullopt;
}

// pipesched's lowering before channels were kept in order: each receive right before its
// consumer (here with the waits PyTorch 2.15 needs). For some schedules that breaks rule (3).
ps::Schedule consumer_order_lowering(const ps::Schedule& s) {
  ps::Schedule out = ps::lower_communication(s);
  for (auto& list : out.ranks) {
    std::vector<ps::Action> recvs, rest;
    for (const ps::Action& a : list)
      (a.kind == ps::OpKind::RecvF || a.kind == ps::OpKind::RecvB ? recvs : rest).push_back(a);
    std::vector<ps::Action> rebuilt;
    for (const ps::Action& a : rest) {
      auto take = [&](ps::OpKind k, const ps::Action& c) {
        for (const ps::Action& r : recvs)
          if (r.kind == k && r.stage == c.stage && r.microbatch == c.microbatch &&
              r.slice == c.slice)
            rebuilt.push_back(r);
      };
      auto one = [&](const ps::Action& c) {
        if (c.kind == ps::OpKind::F) take(ps::OpKind::RecvF, c);
        if (ps::is_input_backward(c.kind)) take(ps::OpKind::RecvB, c);
      };
      if (a.kind == ps::OpKind::Overlap) {
        one(a.forward_half());
        one(a.backward_half());
      } else {
        one(a);
      }
      rebuilt.push_back(a);
    }
    list = rebuilt;
  }
  return out;
}

// find_generator's references stay valid for the program's life (generators() is a copy).
const ps::GeneratorInfo& generator(std::string_view name) {
  return ps::find_generator(name);
}

// ---- gradient reduction as actions ---------------------------------------------------------

ps::Schedule named(const char* name, int ranks, int microbatches, int slices = 1) {
  const ps::GeneratorInfo& g = ps::find_generator(name);
  return g.generate({.ranks = ranks, .microbatches = microbatches, .slices = slices},
                    g.default_wgrad);
}

// Each stage of each rank gets one REDUCE_GRAD, after every action adding to its weight
// gradients, and one WAIT_REDUCE_GRAD after it; the list ends with a WAIT_REDUCE_GRAD; the
// result is valid, lowered or not, and applying the pass again changes nothing.
void expect_reductions_placed(const ps::Schedule& s) {
  SCOPED_TRACE(s.name);
  for (const ps::Schedule& in : {s, ps::lower_communication(s)}) {
    const ps::Schedule out = ps::add_gradient_reduction(in);
    EXPECT_TRUE(ps::check(out).ok()) << ps::check(out).summary();
    EXPECT_EQ(ps::add_gradient_reduction(out).ranks, out.ranks);
    for (int r = 0; r < out.rank_count(); ++r) {
      const auto& list = out.ranks[static_cast<std::size_t>(r)];
      ASSERT_FALSE(list.empty());
      EXPECT_EQ(list.back().kind, ps::OpKind::WaitReduceGrad) << "rank " << r;
      for (int stage : out.placement.stages_of(r)) {
        int starts = 0, waits = 0, start_at = -1, wait_at = -1, last_gradient = -1;
        for (int i = 0; i < static_cast<int>(list.size()); ++i) {
          const ps::Action& a = list[static_cast<std::size_t>(i)];
          if (ps::detail::adds_weight_gradient(a, stage)) last_gradient = i;
          if (a.stage != stage) continue;
          if (a.kind == ps::OpKind::ReduceGrad) ++starts, start_at = i;
          if (a.kind == ps::OpKind::WaitReduceGrad) ++waits, wait_at = i;
        }
        EXPECT_EQ(starts, 1) << "stage " << stage;
        EXPECT_EQ(waits, 1) << "stage " << stage;
        EXPECT_GT(start_at, last_gradient) << "stage " << stage;
        EXPECT_GT(wait_at, start_at) << "stage " << stage;
      }
    }
    // The list is unchanged but for the reductions.
    for (int r = 0; r < out.rank_count(); ++r) {
      std::vector<ps::Action> rest;
      for (const ps::Action& a : out.ranks[static_cast<std::size_t>(r)])
        if (a.kind != ps::OpKind::ReduceGrad && a.kind != ps::OpKind::WaitReduceGrad)
          rest.push_back(a);
      EXPECT_EQ(rest, in.ranks[static_cast<std::size_t>(r)]);
    }
  }
}

TEST(GradientReduction, OneReductionPerStageAfterItsLastWeightGradient) {
  expect_reductions_placed(named("1f1b", 4, 8));
  expect_reductions_placed(named("interleaved-1f1b", 2, 4));
  expect_reductions_placed(named("zb-h1", 4, 8));
  expect_reductions_placed(named("zb-v", 2, 4));
  expect_reductions_placed(named("slice-pipe", 2, 4, 2));
  expect_reductions_placed(named("dualpipe-v", 4, 8));
}

// Every order, Chimera's included (the stages of its second replica run no microbatch 0, and
// their reductions name none), in each of its backward modes: the reductions are placed and
// the result validates.
TEST(GradientReduction, EveryOrdersReductionsValidate) {
  for (const ps::GeneratorInfo& g : ps::generators())
    for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
      if ((wg == ps::WGradMode::Fused && !g.fused) || (wg == ps::WGradMode::Split && !g.split))
        continue;
      for (auto [p, m] : {std::pair{2, 4}, std::pair{4, 8}, std::pair{3, 7}}) {
        ps::Schedule s;
        try {
          s = g.generate({.ranks = p, .microbatches = m}, wg);
        } catch (const ps::invalid_problem&) {
          continue;  // sizes the order refuses (tested with each generator)
        }
        s.name += wg == ps::WGradMode::Split ? " split" : " fused";
        expect_reductions_placed(s);
      }
    }
}

// In 1F1B the last stage finishes its backward first: its reduction starts (in the simulated
// step) before the first rank's list ends, and overlaps the cooldown.
TEST(GradientReduction, TheLastStagesReductionStartsBeforeTheFirstRankEnds) {
  const ps::Schedule s = ps::add_gradient_reduction(ps::lower_communication(named("1f1b", 4, 8)));
  const ps::SimulationResult r = ps::simulate(s, ps::UniformCost{});
  const auto& last = s.ranks[3];
  double start = -1;
  for (std::size_t i = 0; i < last.size(); ++i)
    if (last[i].kind == ps::OpKind::ReduceGrad) start = r.timing[3][i].start;
  ASSERT_GE(start, 0);
  EXPECT_LT(start, r.ranks[0].end);
}

// A schedule that already reduces gradients (PyTorch's lowered files) keeps its own places.
TEST(GradientReduction, AScheduleThatReducesKeepsItsReductions) {
  ps::Schedule s = ps::lower_communication(named("1f1b", 2, 4));
  s.ranks[0].push_back(ps::Action::make(ps::OpKind::ReduceGrad, 0, 0));
  s.ranks[0].push_back(ps::Action::make(ps::OpKind::WaitReduceGrad, 0, 0));
  EXPECT_EQ(ps::add_gradient_reduction(s).ranks, s.ranks);
}

}  // namespace

TEST(LowerCommunication, EveryGeneratorOverTheGrid) {
  int checked = 0, out_of_order_before = 0;
  for (const ps::GeneratorInfo& g : ps::generators())
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 32; m += (m < 8 ? 1 : 5))
        for (int v = 1; v <= 4; ++v)
          for (ps::WGradMode wg : {ps::WGradMode::Fused, ps::WGradMode::Split}) {
            if (!g.chunks_vary && v != g.default_chunks) continue;
            if ((wg == ps::WGradMode::Fused && !g.fused) ||
                (wg == ps::WGradMode::Split && !g.split))
              continue;
            ps::Schedule s;
            try {
              s = g.generate({.ranks = p, .stages = p * v, .microbatches = m}, wg);
            } catch (const ps::invalid_problem&) {
              continue;  // refusals are tested with each generator
            }
            SCOPED_TRACE(std::string(g.name) + " p=" + std::to_string(p) + " m=" +
                         std::to_string(m) + " v=" + std::to_string(v) + " " + ps::to_string(wg));
            ps::Schedule low = ps::lower_communication(s);
            ps::ValidationReport rep = ps::check(low);
            ASSERT_TRUE(rep.ok()) << rep.summary();
            std::size_t sends = 0, recvs = 0, waits = 0;
            for (int r = 0; r < low.rank_count(); ++r) {
              std::vector<ps::Action> compute;
              for (const ps::Action& a : low.ranks[r]) {
                if (a.kind == ps::OpKind::SendF || a.kind == ps::OpKind::SendB)
                  ++sends;
                else if (a.kind == ps::OpKind::RecvF || a.kind == ps::OpKind::RecvB)
                  ++recvs;
                else if (ps::is_wait_send(a.kind))
                  ++waits;
                else
                  compute.push_back(a);
              }
              ASSERT_EQ(compute, s.ranks[r]) << "rank " << r;
            }
            EXPECT_EQ(sends, cross_rank_edges(s));
            EXPECT_EQ(recvs, cross_rank_edges(s));
            EXPECT_EQ(waits, sends);
            const std::optional<std::string> broken = pytorch_rule_broken(low);
            EXPECT_FALSE(broken) << *broken;
            // Posting receives where FIFO needs them adds no wait: the lowered schedule takes
            // as long as the compute-only one (UniformCost, no transfer time).
            EXPECT_DOUBLE_EQ(ps::simulate(low).makespan, ps::simulate(s).makespan);
            ++checked;
            if (pytorch_rule_broken(consumer_order_lowering(s))) ++out_of_order_before;
          }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(out_of_order_before, 0);
  std::cout << "[ lowered ] " << checked << " schedules keep PyTorch 2.15's rules; "
            << out_of_order_before
            << " of them had a channel out of order with each receive before its consumer\n";
}

// The grid points where lowering each receive right before its consumer broke send order on
// a channel that carries traffic both ways (PyTorch then ran with wrong gradients).
TEST(LowerCommunication, KeepsChannelsInOrderWhereConsumerOrderDoesNot) {
  struct Case {
    std::string_view name;
    int ranks, chunks, microbatches;
  };
  int non_fifo_before = 0;
  for (const Case& c :
       {Case{"zb-v", 2, 2, 8}, Case{"zb-v", 4, 2, 8}, Case{"dualpipe-v", 4, 2, 10},
        Case{"slice-pipe", 2, 1, 4}, Case{"zb-v", 2, 2, 4}, Case{"dualpipe-v", 4, 2, 8}}) {
    const ps::GeneratorInfo& g = generator(c.name);
    ps::Problem p{.ranks = c.ranks,
                  .stages = c.ranks * (g.chunks_vary ? c.chunks : g.default_chunks),
                  .microbatches = c.microbatches};
    if (g.slices) p.slices = 2;
    SCOPED_TRACE(std::string(c.name) + " p=" + std::to_string(c.ranks));
    const ps::Schedule s = g.generate(p, g.default_wgrad);
    const ps::Schedule old = consumer_order_lowering(s);
    if (const auto why = pytorch_rule_broken(old)) {
      SCOPED_TRACE(*why);
      ++non_fifo_before;
      // The validator refuses it, naming the channel and the first message out of order.
      const ps::ValidationReport rep = ps::check(old);
      ASSERT_TRUE(rep.has("channel-order")) << rep.summary();
      EXPECT_NE(rep.summary().find("channel rank "), std::string::npos) << rep.summary();
      EXPECT_NE(rep.summary().find("is not first-in first-out"), std::string::npos);
    }
    const ps::Schedule low = ps::lower_communication(s);
    const std::optional<std::string> broken = pytorch_rule_broken(low);
    EXPECT_FALSE(broken) << *broken;
    const ps::ValidationReport rep = ps::check(low);
    EXPECT_TRUE(rep.ok()) << rep.summary();
  }
  EXPECT_GE(non_fifo_before, 3);
}

TEST(LowerCommunication, WaitsFollowPyTorchsPlaces) {
  const ps::Schedule s =
      generator("1f1b").generate({.ranks = 2, .microbatches = 2}, ps::WGradMode::Fused);
  const ps::Schedule low = ps::lower_communication(s);
  auto text = [](const std::vector<ps::Action>& l) {
    std::string out;
    for (const ps::Action& a : l)
      out += (out.empty() ? "" : ",") + ps::to_string(a);
    return out;
  };
  // A forward send's wait follows the unit's backward; gradient sends' waits end the list.
  EXPECT_EQ(text(low.ranks[0]),
            "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0WAIT_SEND_F1");
  EXPECT_EQ(text(low.ranks[1]),
            "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1WAIT_SEND_B0,1WAIT_SEND_B1");
  const ps::Schedule bare = ps::lower_communication(s, {.wait_sends = false});
  for (const auto& list : bare.ranks)
    for (const ps::Action& a : list)
      EXPECT_FALSE(ps::is_wait_send(a.kind)) << a;
}

TEST(LowerCommunication, SendWithoutItsWaitIsRefusedWhenWaitsArePresent) {
  ps::Schedule low = ps::lower_communication(
      generator("1f1b").generate({.ranks = 2, .microbatches = 2}, ps::WGradMode::Fused));
  auto& list = low.ranks[0];
  for (auto it = list.begin(); it != list.end(); ++it)
    if (it->kind == ps::OpKind::WaitSendF && it->microbatch == 1) {
      list.erase(it);
      break;
    }
  const ps::ValidationReport rep = ps::check(low);
  ASSERT_TRUE(rep.has("missing-wait")) << rep.summary();
  EXPECT_NE(rep.summary().find("0SEND_F1 at rank 0"), std::string::npos) << rep.summary();
  EXPECT_NE(rep.summary().find("0WAIT_SEND_F1"), std::string::npos) << rep.summary();
  // Without any wait, sends complete at the end of the step: pipesched's earlier files.
  ps::Schedule none = ps::lower_communication(
      generator("1f1b").generate({.ranks = 2, .microbatches = 2}, ps::WGradMode::Fused),
      {.wait_sends = false});
  EXPECT_TRUE(ps::check(none).ok()) << ps::check(none).summary();
  // A wait before its send, or one without a send, is refused.
  ps::Schedule early = ps::lower_communication(
      generator("1f1b").generate({.ranks = 2, .microbatches = 2}, ps::WGradMode::Fused));
  early.ranks[1].insert(early.ranks[1].begin(), ps::Action::make(ps::OpKind::WaitSendB, 1, 0));
  const ps::ValidationReport bad = ps::check(early);
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(bad.has("order") || bad.has("duplicate")) << bad.summary();
}

// PyTorch posts receives well ahead of their consumers. Run as blocking receives, a
// PyTorch-lowered Interleaved 1F1B at p = 16 took 1,431 against 406.5; posted, the two agree.
TEST(LowerCommunication, PostedAheadReceivesCostNothing) {
  const ps::Schedule s =
      generator("interleaved-1f1b")
          .generate({.ranks = 16, .stages = 32, .microbatches = 128}, ps::WGradMode::Fused);
  const ps::Schedule pt = ps::testing::pytorch_style_lowering(s);
  const ps::ValidationReport rep = ps::check(pt);
  ASSERT_TRUE(rep.ok()) << rep.summary();
  const double compute_only = ps::simulate(s).makespan;
  EXPECT_DOUBLE_EQ(compute_only, 406.5);
  EXPECT_DOUBLE_EQ(ps::simulate(pt).makespan, compute_only);
  EXPECT_DOUBLE_EQ(ps::simulate(ps::lower_communication(s)).makespan, compute_only);
  // With a transfer time, a receive posted ahead still waits only for the data.
  const ps::UniformCost slow{.comm = 0.25};
  EXPECT_DOUBLE_EQ(ps::simulate(pt, slow).makespan,
                   ps::simulate(ps::lower_communication(s), slow).makespan);
}

// Posting receives early keeps real deadlocks: rank 0 waits for the gradient of microbatch 0
// before it sends forward 1, which rank 1 needs before it sends that gradient.
TEST(LowerCommunication, PostedReceivesStillFindDeadlocks) {
  ps::Schedule s =
      generator("1f1b").generate({.ranks = 2, .microbatches = 2}, ps::WGradMode::Fused);
  auto a = [](const char* t) { return ps::parse_action(t); };
  s.ranks[0] = {a("0F0"), a("0SEND_F0"), a("0RECV_B0"), a("0B0"),
                a("0F1"), a("0SEND_F1"), a("0RECV_B1"), a("0B1")};
  s.ranks[1] = {a("1RECV_F0"), a("1RECV_F1"), a("1F0"), a("1F1"),
                a("1B0"),      a("1SEND_B0"), a("1B1"), a("1SEND_B1")};
  const ps::ValidationReport rep = ps::check(s);
  ASSERT_TRUE(rep.has("deadlock")) << rep.summary();
  EXPECT_TRUE(ps::simulate(s).deadlock);
  // A wait for a send whose receive the peer posts only after something that needs this
  // rank's later output is a deadlock too (and here also out of channel order).
  ps::Schedule w = s;
  w.ranks[0] = {a("0F0"),      a("0SEND_F0"), a("0WAIT_SEND_F0"), a("0F1"), a("0SEND_F1"),
                a("0RECV_B0"), a("0B0"),      a("0RECV_B1"),      a("0B1"), a("0WAIT_SEND_F1")};
  w.ranks[1] = {a("1RECV_F1"), a("1F1"), a("1RECV_F0"), a("1F0"),           a("1B0"),
                a("1SEND_B0"), a("1B1"), a("1SEND_B1"), a("1WAIT_SEND_B0"), a("1WAIT_SEND_B1")};
  EXPECT_TRUE(ps::check(w).has("channel-order")) << ps::check(w).summary();
  EXPECT_TRUE(ps::simulate(w).deadlock);
}

}  // namespace test_lower_communication
