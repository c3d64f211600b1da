// Communication lowering over every generator and grid point: the lowered schedule
// validates (its receives wait for matching sends in the dry run), has one send and one
// receive per cross-rank dependency, and keeps the compute actions in their order.
#include <gtest/gtest.h>

#include "pipesched/analysis/validate.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/schedule/registry.hpp"

namespace ps = pipesched;

namespace {

// Cross-rank edges of a compute-only schedule: forward hand-offs s -> s+1 and gradient
// hand-offs s -> s-1 whose stages sit on different ranks, per microbatch and slice.
std::size_t cross_rank_edges(const ps::Schedule& s) {
  std::size_t n = 0;
  for (int st = 0; st + 1 < s.problem.stages; ++st)
    if (s.placement.rank_of(st) != s.placement.rank_of(st + 1)) ++n;
  return 2 * n * s.problem.microbatches * s.problem.slices;
}

}  // namespace

TEST(LowerCommunication, EveryGeneratorOverTheGrid) {
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
            std::size_t sends = 0, recvs = 0;
            for (int r = 0; r < low.rank_count(); ++r) {
              std::vector<ps::Action> compute;
              for (const ps::Action& a : low.ranks[r]) {
                if (a.kind == ps::OpKind::SendF || a.kind == ps::OpKind::SendB)
                  ++sends;
                else if (a.kind == ps::OpKind::RecvF || a.kind == ps::OpKind::RecvB)
                  ++recvs;
                else
                  compute.push_back(a);
              }
              ASSERT_EQ(compute, s.ranks[r]) << "rank " << r;
            }
            EXPECT_EQ(sends, cross_rank_edges(s));
            EXPECT_EQ(recvs, cross_rank_edges(s));
          }
}
