// Vocabulary parallelism: the passes VOCAB_F and VOCAB_B in the vocabulary (action strings, CSV
// and text round trips, PyTorch's refusal), validated (counts, placement, ranges, order,
// replicas), simulated (the broadcast, the reduction and the memory, timed exactly under
// UniformCost), priced by TransformerCost (the head off the last stage, its weights shared by
// every rank), and placed by add_vocabulary_passes into every generator's schedule without a
// deadlock; the same for the input embedding's EMBED_F and EMBED_B (the token table off the
// first stage); the executor's refusals where it cannot run them (its numerics are in
// test_toy_numerics.cpp and the MPI tests).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/analysis/validate.hpp"
#include "pipesched/io/action_string.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/pass/vocabulary.hpp"
#include "pipesched/policy/assemble.hpp"
#include "pipesched/policy/checkpoint_registry.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/toy/synthetic.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"

namespace test_vocabulary {

namespace ps = pipesched;
using ps::Action;
using ps::OpKind;

namespace {

constexpr double eps = 1e-9;

Action act(OpKind k, int stage, int mb = 0) {
  return Action::make(k, stage, mb);
}

// 1F1B over 2 ranks and 1 microbatch with its vocabulary passes written by hand.
ps::Schedule two_ranks_by_hand() {
  ps::Schedule s;
  s.name = "by-hand";
  s.problem = {.ranks = 2, .stages = 2, .microbatches = 1};
  s.placement = ps::Placement::linear(2);
  s.ranks = {
      {act(OpKind::F, 0), act(OpKind::VocabF, 0), act(OpKind::VocabB, 0), act(OpKind::B, 0)},
      {act(OpKind::F, 1), act(OpKind::VocabF, 1), act(OpKind::B, 1), act(OpKind::VocabB, 1)}};
  return s;
}

// The two-rank schedule above with the input embedding's passes: every shard's lookups first,
// its rows' gradient last.
ps::Schedule two_ranks_with_embedding() {
  ps::Schedule s = two_ranks_by_hand();
  for (int r = 0; r < 2; ++r) {
    auto& list = s.ranks[static_cast<std::size_t>(r)];
    list.insert(list.begin(), act(OpKind::EmbedF, r));
    list.push_back(act(OpKind::EmbedB, r));
  }
  return s;
}

ps::UniformCost embedding_cost() {
  ps::UniformCost c;
  c.comm = 0.5;
  c.vf = 0.25;
  c.vb = 0.5;
  c.vmem = 0.25;
  c.input_vocabulary = true;
  c.ef = 0.125;
  c.eb = 0.25;
  return c;
}

bool has_rule(const ps::ValidationReport& rep, const std::string& rule) {
  return rep.has(rule);
}

std::string message_of(const ps::ValidationReport& rep) {
  return rep.message("s");
}

// A cost without the vocabulary hooks.
struct PlainCost {
  double duration(const ps::CostContext&, const Action&) const { return 1; }
  double memory_delta(const ps::CostContext&, const Action&, bool) const { return 0; }
  double transfer_time(const ps::CostContext&, const Action&) const { return 0; }
};
static_assert(!ps::has_vocabulary_cost<PlainCost>);

}  // namespace

TEST(Vocabulary, ActionStringsRoundTripAndPyTorchRefusesThem) {
  for (const char* text : {"2VOCAB_F0", "0VOCAB_B7", "1VOCAB_F3.2"}) {
    const Action a = ps::parse_action(text);
    EXPECT_TRUE(ps::is_vocabulary(a.kind)) << text;
    EXPECT_EQ(ps::to_string(a), text);
  }
  EXPECT_EQ(ps::parse_action("2VOCAB_F0").kind, OpKind::VocabF);
  EXPECT_EQ(ps::parse_action("2VOCAB_B0").kind, OpKind::VocabB);
  EXPECT_THROW(ps::parse_action("2VOCAB_X0"), ps::parse_error);

  const ps::Schedule s = two_ranks_by_hand();
  const ps::Schedule csv = [&] {
    std::istringstream in(ps::to_csv(s));
    return ps::read_csv(in, "by-hand");
  }();
  EXPECT_EQ(csv.ranks, s.ranks);
  EXPECT_EQ(csv.problem, s.problem);
  EXPECT_EQ(csv.placement, s.placement);
  std::istringstream text(ps::to_text(s));
  EXPECT_EQ(ps::read_text(text), s);
  try {
    ps::check_pytorch_runnable(s);
    ADD_FAILURE() << "PyTorch was given vocabulary passes";
  } catch (const ps::invalid_schedule& e) {
    EXPECT_NE(std::string(e.what()).find("0VOCAB_F0 (rank 0 position 1)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("without --vocab-parallel"), std::string::npos);
  }
}

TEST(Vocabulary, ValidationCountsPlacesAndOrdersThePasses) {
  const ps::Schedule ok = two_ranks_by_hand();
  EXPECT_TRUE(ps::check(ok).ok()) << message_of(ps::check(ok));

  ps::Schedule missing = ok;
  missing.ranks[1].pop_back();  // 1VOCAB_B0
  auto rep = ps::check(missing);
  EXPECT_TRUE(has_rule(rep, "missing")) << message_of(rep);
  EXPECT_NE(message_of(rep).find("rank 1 never runs 1VOCAB_B0"), std::string::npos)
      << message_of(rep);

  ps::Schedule twice = ok;
  twice.ranks[0].push_back(act(OpKind::VocabB, 0));
  rep = ps::check(twice);
  EXPECT_TRUE(has_rule(rep, "duplicate")) << message_of(rep);

  ps::Schedule misplaced = ok;
  misplaced.ranks[0][1] = act(OpKind::VocabF, 1);  // shard 1 on rank 0
  misplaced.ranks[1][1] = act(OpKind::VocabF, 0);
  rep = ps::check(misplaced);
  EXPECT_TRUE(has_rule(rep, "placement")) << message_of(rep);
  EXPECT_NE(message_of(rep).find("lives on rank j and its passes run there"), std::string::npos);

  ps::Schedule outside = ok;
  outside.ranks[1].push_back(act(OpKind::VocabF, 5));
  rep = ps::check(outside);
  EXPECT_TRUE(has_rule(rep, "index-range")) << message_of(rep);
  EXPECT_NE(message_of(rep).find("vocabulary shards run 0..1"), std::string::npos);

  // The last stage's backward before its own rank's VOCAB_F: it needs every shard's.
  ps::Schedule early = ok;
  std::swap(early.ranks[1][1], early.ranks[1][2]);
  rep = ps::check(early);
  EXPECT_TRUE(has_rule(rep, "order")) << message_of(rep);
  EXPECT_NE(message_of(rep).find("after the VOCAB_F of every shard"), std::string::npos);

  // A VOCAB_B waiting on rank 0 before the forward of stage 0: rank 1's VOCAB_F waits for the
  // last stage, which waits for stage 0: a deadlock.
  ps::Schedule stuck = ok;
  stuck.ranks[0] = {act(OpKind::VocabF, 0), act(OpKind::F, 0), act(OpKind::VocabB, 0),
                    act(OpKind::B, 0)};
  rep = ps::check(stuck);
  EXPECT_TRUE(has_rule(rep, "deadlock")) << message_of(rep);

  ps::Schedule replicas = ok;
  replicas.problem.replicas = 2;
  replicas.problem.stages = 4;
  replicas.placement = ps::Placement::interleaved(2, 2);
  rep = ps::check(replicas);
  EXPECT_TRUE(has_rule(rep, "vocabulary")) << message_of(rep);
}

// f = 1, b = 2, comm = 0.5, vf = 0.25, vb = 0.5, vmem = 0.25 (see the comments for each time).
TEST(Vocabulary, SimulationTimesTheBroadcastTheReductionAndTheMemory) {
  ps::UniformCost c;
  c.comm = 0.5;
  c.vf = 0.25;
  c.vb = 0.5;
  c.vmem = 0.25;
  const ps::SimulationResult r = ps::simulate(two_ranks_by_hand(), c);
  ASSERT_FALSE(r.deadlock) << r.deadlock_report;
  auto at = [&](int rank, int pos) { return r.timing[rank][pos]; };
  EXPECT_NEAR(at(0, 0).end, 1, eps);       // 0F0
  EXPECT_NEAR(at(1, 0).start, 1.5, eps);   // 1F0 after the message
  EXPECT_NEAR(at(1, 1).start, 2.5, eps);   // 1VOCAB_F0: the last stage's rank, no broadcast
  EXPECT_NEAR(at(0, 1).start, 3.0, eps);   // 0VOCAB_F0: 2.5 + the broadcast
  EXPECT_NEAR(at(0, 2).start, 3.75, eps);  // 0VOCAB_B0: the last VOCAB_F (3.25) + the reduction
  EXPECT_NEAR(at(1, 2).start, 3.75, eps);  // 1B0 waits for the reduction too
  EXPECT_NEAR(at(1, 3).start, 5.75, eps);  // 1VOCAB_B0 after it
  EXPECT_NEAR(at(0, 3).start, 6.25, eps);  // 0B0 after 1B0's gradient
  EXPECT_NEAR(r.makespan, 8.25, eps);
  EXPECT_NEAR(r.ranks[0].peak_memory, 1.25, eps);
  EXPECT_NEAR(r.ranks[1].peak_memory, 1.25, eps);
  EXPECT_NEAR(r.ranks[0].busy, 1 + 0.25 + 0.5 + 2, eps);

  try {
    (void)ps::simulate(two_ranks_by_hand(), PlainCost{});
    ADD_FAILURE() << "a cost without vocabulary hooks simulated vocabulary passes";
  } catch (const ps::invalid_schedule& e) {
    EXPECT_NE(std::string(e.what()).find("does not price them"), std::string::npos) << e.what();
  }
}

TEST(Vocabulary, PassesGoIntoEveryOneReplicaGeneratorWithoutDeadlock) {
  ps::UniformCost c;
  c.comm = 0.1;
  int schedules = 0;
  for (const ps::GeneratorInfo& g : ps::builtin_generators()) {
    for (int ranks = 1; ranks <= 4; ++ranks)
      for (int mb : {1, 3, 8})
        for (int slices : {1, 2}) {
          if (slices > 1 && !g.slices) continue;
          ps::Schedule s;
          try {
            s = g.generate({.ranks = ranks, .microbatches = mb, .slices = slices}, g.default_wgrad);
          } catch (const ps::invalid_problem&) {
            continue;  // a size this order does not take
          }
          if (s.problem.replicas != 1) {
            EXPECT_THROW((void)ps::add_vocabulary_passes(s, c), ps::invalid_problem) << g.name;
            continue;
          }
          const ps::Schedule v = ps::add_vocabulary_passes(s, c);
          ++schedules;
          const std::string what = std::string(g.name) + " p=" + std::to_string(ranks) +
                                   " m=" + std::to_string(mb) + " k=" + std::to_string(slices);
          const auto rep = ps::check(v);
          ASSERT_TRUE(rep.ok()) << what << ": " << message_of(rep);
          const std::size_t passes = static_cast<std::size_t>(ranks) * mb * slices;
          EXPECT_EQ(v.count(OpKind::VocabF), passes) << what;
          EXPECT_EQ(v.count(OpKind::VocabB), passes) << what;
          EXPECT_EQ(v.action_count(), s.action_count() + 2 * passes) << what;
          const ps::SimulationResult r = ps::simulate(v, c);
          EXPECT_FALSE(r.deadlock) << what;
          // Placed into the schedule's own order (lag 0), the passes only add work: no action
          // starts earlier than it did without them.
          const ps::Schedule kept = ps::add_vocabulary_passes(s, c, {.lag = 0});
          EXPECT_TRUE(ps::check(kept).ok()) << what;
          EXPECT_GE(ps::simulate(kept, c).makespan + eps, ps::simulate(s, c).makespan) << what;
          // Lowered to sends and receives, the collectives stay direct edges.
          EXPECT_TRUE(ps::check(ps::lower_communication(v)).ok()) << what;
          // With the input embedding split too: an EMBED_F and an EMBED_B per rank and unit.
          const ps::Schedule both = ps::add_vocabulary_passes(s, embedding_cost());
          const auto both_rep = ps::check(both);
          ASSERT_TRUE(both_rep.ok()) << what << ", embedding split: " << message_of(both_rep);
          EXPECT_EQ(both.count(OpKind::EmbedF), passes) << what;
          EXPECT_EQ(both.count(OpKind::EmbedB), passes) << what;
          EXPECT_EQ(both.action_count(), s.action_count() + 4 * passes) << what;
          EXPECT_FALSE(ps::simulate(both, embedding_cost()).deadlock) << what;
          EXPECT_TRUE(ps::check(ps::lower_communication(both)).ok()) << what;
        }
  }
  EXPECT_GT(schedules, 100);
}

TEST(Vocabulary, AddingThePassesRefusesWhatItCannotPlace) {
  const ps::GeneratorInfo& g = ps::find_generator("1f1b");
  const ps::Schedule s = g.generate({.ranks = 2, .microbatches = 2}, g.default_wgrad);
  const ps::Schedule v = ps::add_vocabulary_passes(s, ps::UniformCost{});
  EXPECT_EQ(v.name, s.name + "+vocab");
  EXPECT_THROW((void)ps::add_vocabulary_passes(v, ps::UniformCost{}), ps::invalid_problem);
  EXPECT_THROW((void)ps::add_vocabulary_passes(ps::lower_communication(s), ps::UniformCost{}),
               ps::invalid_problem);
  const PlainCost plain;
  EXPECT_THROW((void)ps::add_vocabulary_passes(s, ps::CostRef(plain)), ps::invalid_problem);
}

// A lag of one holds one more microbatch on every rank, as a warm-up one forward longer does;
// a budget keeps the placement within it; a lag the schedule cannot take is refused.
TEST(Vocabulary, ALagHoldsMoreMicrobatchesWithinTheBudget) {
  ps::UniformCost c;
  c.vmem = 0;  // the passes hold nothing: the peaks are the backwards'
  const int p = 4;
  const ps::GeneratorInfo& g = ps::find_generator("1f1b");
  const ps::Schedule s = g.generate({.ranks = p, .microbatches = 8}, g.default_wgrad);
  const ps::SimulationResult lag0 = ps::simulate(ps::add_vocabulary_passes(s, c, {.lag = 0}), c);
  const ps::SimulationResult lag1 = ps::simulate(ps::add_vocabulary_passes(s, c, {.lag = 1}), c);
  for (int r = 0; r < p; ++r) {
    EXPECT_NEAR(lag0.ranks[r].peak_memory, p - r, eps) << r;
    EXPECT_NEAR(lag1.ranks[r].peak_memory, p - r + 1, eps) << r;
  }
  c.vmem = 0.25;
  ps::VocabularyOptions within;
  within.budget.all = p + 0.25;  // 1F1B's peak and one pass's memory: no room for a lag
  const ps::SimulationResult fitted = ps::simulate(ps::add_vocabulary_passes(s, c, within), c);
  EXPECT_LE(fitted.peak_memory_max, p + 0.25 + eps);
  const ps::GeneratorInfo& v = ps::find_generator("zb-v");
  const ps::Schedule zbv = v.generate({.ranks = p, .microbatches = 8}, v.default_wgrad);
  try {
    (void)ps::add_vocabulary_passes(zbv, c, {.lag = 2});
    ADD_FAILURE() << "a lag that deadlocks was taken";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("without a deadlock"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)ps::add_vocabulary_passes(s, c, {.lag = -2}), ps::invalid_problem);
}

// assemble_plan adds the passes last, within the budget: where they take a rank over it, the
// plan is built again under a budget smaller by what they hold, and checkpointing makes room.
TEST(Vocabulary, PlansMakeRoomForThePassesWithinTheBudget) {
  ps::UniformCost c;  // vmem 0.25: a pass holds a quarter of a microbatch's activations
  const ps::GeneratorInfo& g = ps::find_generator("1f1b");
  const ps::Problem p{.ranks = 4, .microbatches = 8};
  ps::MemoryBudget budget;
  budget.all = 4;  // 1F1B's own peak on rank 0
  ps::PlanRecipe recipe;
  recipe.vocabulary = true;
  const auto plan = ps::assemble_plan(g, p, c, budget, recipe, ps::find_checkpoint("selective"));
  EXPECT_EQ(plan.schedule.count(OpKind::VocabF), 32u);
  const ps::SimulationResult r = ps::simulate(plan.schedule, c);
  EXPECT_LE(r.peak_memory_max, 4 + eps);
  EXPECT_GT(plan.schedule.count(OpKind::R), 0u);  // the room came from recomputing
  EXPECT_DOUBLE_EQ(plan.budget.of(0), 4.0);       // the budget asked for
  try {
    (void)ps::assemble_plan(g, p, c, budget, recipe, ps::find_checkpoint("none"));
    ADD_FAILURE() << "a plan without checkpointing fitted its passes into 1F1B's own peak";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary passes"), std::string::npos) << e.what();
  }
  ps::TransformerCost head_on_last{
      ps::presets::find_model("gpt3-1.3b"), ps::presets::find_device("h100"), {}};
  EXPECT_THROW((void)ps::assemble_plan(g, p, head_on_last, ps::MemoryBudget{}, recipe,
                                       ps::find_checkpoint("none")),
               ps::invalid_problem);
}

TEST(Vocabulary, TransformerCostMovesTheHeadOffTheLastStage) {
  ps::TransformerCost base{
      ps::presets::find_model("llama2-13b"), ps::presets::find_device("rtx-4090"), {}};
  ps::TransformerCost vocab = base;
  vocab.parallel.vocabulary = true;
  const int p = 16;
  const ps::Problem problem{.ranks = p, .stages = p, .microbatches = 4};
  const ps::Placement pl = ps::Placement::linear(p);
  const ps::CostContext ctx{problem, pl, 1};
  const Action last_f = act(OpKind::F, p - 1), first_f = act(OpKind::F, 0);
  // The last stage loses the head's GEMM and its logits; stage 0 keeps what it had.
  EXPECT_LT(vocab.duration(ctx, last_f), base.duration(ctx, last_f));
  EXPECT_LT(vocab.memory_delta(ctx, last_f, false), base.memory_delta(ctx, last_f, false));
  EXPECT_DOUBLE_EQ(vocab.duration(ctx, first_f), base.duration(ctx, first_f));
  EXPECT_EQ(vocab.weight_gemms(ctx, p - 1), base.weight_gemms(ctx, p - 1) - 1);
  // The head's weights, V·h, in p shards: the last rank holds 15/16 of them less, the others
  // 1/16 more.
  const double head = base.model.embedding_parameters();
  EXPECT_NEAR(vocab.rank_parameters(ctx, p - 1), base.rank_parameters(ctx, p - 1) - head + head / p,
              1);
  EXPECT_NEAR(vocab.rank_parameters(ctx, 3), base.rank_parameters(ctx, 3) + head / p, 1);
  // A VOCAB_F holds the 32-bit logits of its V/p entries and the 16-bit input.
  const ps::ModelShape& m = base.model;
  const double tokens = static_cast<double>(m.microbatch_size) * m.sequence;
  const Action vf = act(OpKind::VocabF, 3), vb = act(OpKind::VocabB, 3);
  EXPECT_DOUBLE_EQ(vocab.vocabulary_bytes(ctx, vf),
                   4 * tokens * m.vocabulary / p + tokens * m.hidden * m.bytes_per_value);
  EXPECT_GT(vocab.vocabulary_seconds(ctx, vf), 0);
  EXPECT_GT(vocab.vocabulary_seconds(ctx, vb), 0);
  // The VOCAB_F does two GEMMs of the shard, the head's forward over p ranks one.
  EXPECT_LT(vocab.vocabulary_seconds(ctx, vf),
            base.duration(ctx, last_f) - vocab.duration(ctx, last_f));
  EXPECT_GT(vocab.vocabulary_transfer_seconds(ctx, vf), 0);  // from rank 15 to rank 3
  EXPECT_DOUBLE_EQ(vocab.vocabulary_transfer_seconds(ctx, act(OpKind::VocabF, p - 1)), 0.0);
  EXPECT_GT(vocab.vocabulary_transfer_seconds(ctx, vb), 0);  // the reduction
  EXPECT_THROW((void)base.vocabulary_seconds(ctx, vf), ps::invalid_schedule);

  // 1F1B with the passes: no deadlock; the cost without the split refuses the schedule.
  const ps::GeneratorInfo& g = ps::find_generator("1f1b");
  const ps::Schedule s = g.generate({.ranks = p, .microbatches = 32}, g.default_wgrad);
  const ps::Schedule v = ps::add_vocabulary_passes(s, vocab);
  const ps::SimulationResult r = ps::simulate(v, vocab);
  EXPECT_FALSE(r.deadlock);
  // The last rank, without the head, is busy for less; the step stays within 1 % of 1F1B's
  // without the split (the passes cost every rank 2.3 ms a microbatch; docs/baselines.md).
  const ps::SimulationResult plain = ps::simulate(s, base);
  EXPECT_LT(r.ranks[p - 1].busy, plain.ranks[p - 1].busy);
  EXPECT_LT(r.makespan, 1.01 * plain.makespan);
  try {
    (void)ps::simulate(v, base);
    ADD_FAILURE() << "the head was computed twice";
  } catch (const ps::invalid_schedule& e) {
    EXPECT_NE(std::string(e.what()).find("keeps the output layer on the last stage"),
              std::string::npos)
        << e.what();
  }
  // Chimera's two replicas cannot share one vocabulary split.
  const ps::Problem chimera{.ranks = 4, .stages = 8, .microbatches = 4, .replicas = 2};
  const ps::Placement cpl = ps::Placement::interleaved(4, 2);
  EXPECT_THROW((void)vocab.duration({chimera, cpl, 1}, act(OpKind::F, 0)), ps::invalid_problem);
}

// ---- the input embedding split too: EMBED_F, EMBED_B (helpers above) -------------------------

TEST(InputVocabulary, PassesRoundTripValidateAndTimeTheReductionAndTheBroadcast) {
  for (const char* text : {"2EMBED_F0", "0EMBED_B7", "1EMBED_F3.2"}) {
    const Action a = ps::parse_action(text);
    EXPECT_TRUE(ps::is_vocabulary(a.kind) && ps::is_input_vocabulary(a.kind)) << text;
    EXPECT_EQ(ps::to_string(a), text);
  }
  const ps::Schedule s = two_ranks_with_embedding();
  EXPECT_TRUE(s.has_input_vocabulary());
  EXPECT_FALSE(two_ranks_by_hand().has_input_vocabulary());
  std::istringstream text(ps::to_text(s));
  EXPECT_EQ(ps::read_text(text), s);
  std::istringstream csv(ps::to_csv(s));
  EXPECT_EQ(ps::read_csv(csv, "by-hand").ranks, s.ranks);
  EXPECT_THROW(ps::check_pytorch_runnable(s), ps::invalid_schedule);
  EXPECT_TRUE(ps::check(s).ok()) << message_of(ps::check(s));

  // Every shard runs both passes of every unit, on its own rank, before what needs them.
  ps::Schedule missing = s;
  missing.ranks[1].pop_back();  // 1EMBED_B0
  auto rep = ps::check(missing);
  EXPECT_NE(message_of(rep).find("rank 1 never runs 1EMBED_B0"), std::string::npos)
      << message_of(rep);
  ps::Schedule early = s;
  std::swap(early.ranks[0][0], early.ranks[0][1]);  // 0F0 before its own rank's lookups
  rep = ps::check(early);
  EXPECT_TRUE(has_rule(rep, "order")) << message_of(rep);
  EXPECT_NE(message_of(rep).find("after the EMBED_F of every shard"), std::string::npos)
      << message_of(rep);
  ps::Schedule misplaced = s;
  misplaced.ranks[0][0] = act(OpKind::EmbedF, 1);
  misplaced.ranks[1][0] = act(OpKind::EmbedF, 0);
  EXPECT_TRUE(has_rule(ps::check(misplaced), "placement"));

  // f = 1, b = 2, comm = 0.5, ef = 0.125, eb = 0.25 (and the output layer's as above).
  const ps::UniformCost c = embedding_cost();
  const ps::SimulationResult r = ps::simulate(s, c);
  ASSERT_FALSE(r.deadlock) << r.deadlock_report;
  auto at = [&](int rank, int pos) { return r.timing[rank][pos]; };
  EXPECT_NEAR(at(0, 0).end, 0.125, eps);    // 0EMBED_F0
  EXPECT_NEAR(at(0, 1).start, 0.625, eps);  // 0F0: the last lookup + the reduction
  EXPECT_NEAR(at(1, 2).start, 3.125, eps);  // 1VOCAB_F0 after 1F0 (2.125 to 3.125)
  EXPECT_NEAR(at(1, 3).start, 4.375, eps);  // 1B0 after the output layer's reduction
  EXPECT_NEAR(at(0, 4).start, 6.875, eps);  // 0B0 after 1B0's gradient
  EXPECT_NEAR(at(0, 5).start, 8.875, eps);  // 0EMBED_B0: the first stage's rank, no broadcast
  EXPECT_NEAR(at(1, 5).start, 9.375, eps);  // 1EMBED_B0: 8.875 + the broadcast
  EXPECT_NEAR(r.makespan, 9.625, eps);
  EXPECT_NEAR(r.ranks[0].peak_memory, 1.25, eps);  // the lookups hold nothing
  EXPECT_NEAR(r.ranks[1].busy, 0.125 + 1 + 0.25 + 2 + 0.5 + 0.25, eps);

  // The cost and the schedule must agree on where the embedding is.
  ps::UniformCost kept = c;
  kept.input_vocabulary = false;
  try {
    (void)ps::simulate(s, kept);
    ADD_FAILURE() << "the embedding was computed twice";
  } catch (const ps::invalid_schedule& e) {
    EXPECT_NE(std::string(e.what()).find("keeps the embedding on the first stage"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)ps::simulate(two_ranks_by_hand(), c), ps::invalid_schedule);
  EXPECT_THROW((void)ps::simulate(s, ps::CostRef(kept)), ps::invalid_schedule);
  EXPECT_NEAR(ps::simulate(s, ps::CostRef(c)).makespan, 9.625, eps);
}

TEST(InputVocabulary, TransformerCostMovesTheEmbeddingOffTheFirstStage) {
  ps::TransformerCost head{
      ps::presets::find_model("llama2-13b"), ps::presets::find_device("rtx-4090"), {}};
  head.parallel.vocabulary = true;
  ps::TransformerCost both = head;
  both.parallel.input_vocabulary = true;
  EXPECT_TRUE(both.input_vocabulary_parallel());
  EXPECT_FALSE(head.input_vocabulary_parallel());
  const int p = 16;
  const ps::Problem problem{.ranks = p, .stages = p, .microbatches = 4};
  const ps::Placement pl = ps::Placement::linear(p);
  const ps::CostContext ctx{problem, pl, 1};
  // The token table, V·h, in p shards: rank 0 holds 15/16 of it less, the others 1/16 more.
  const double table = head.model.embedding_parameters();
  EXPECT_NEAR(both.rank_parameters(ctx, 0), head.rank_parameters(ctx, 0) - table + table / p, 1);
  EXPECT_NEAR(both.rank_parameters(ctx, 5), head.rank_parameters(ctx, 5) + table / p, 1);
  // The lookups are memory-bound and hold nothing; the reduction and the broadcast take time.
  const ps::ModelShape& m = head.model;
  const double bytes =
      static_cast<double>(m.microbatch_size) * m.sequence * m.hidden * m.bytes_per_value;
  const Action ef = act(OpKind::EmbedF, 5), eb = act(OpKind::EmbedB, 5);
  EXPECT_NEAR(both.vocabulary_seconds(ctx, ef),
              2 * bytes / both.device.memory_bandwidth + both.device.action_overhead, 1e-12);
  EXPECT_GT(both.vocabulary_seconds(ctx, eb), 0);
  EXPECT_DOUBLE_EQ(both.vocabulary_bytes(ctx, ef), 0.0);
  EXPECT_GT(both.vocabulary_transfer_seconds(ctx, ef), 0);  // the reduction
  EXPECT_GT(both.vocabulary_transfer_seconds(ctx, eb), 0);  // from rank 0 to rank 5
  EXPECT_DOUBLE_EQ(both.vocabulary_transfer_seconds(ctx, act(OpKind::EmbedB, 0)), 0.0);
  EXPECT_THROW((void)head.vocabulary_seconds(ctx, ef), ps::invalid_schedule);
  ps::Parallelism alone;
  alone.input_vocabulary = true;
  EXPECT_THROW(alone.check(), ps::invalid_argument);

  // 1F1B and ZB-V with both layers split: no deadlock, and the schedule with the head alone
  // split is refused by the cost that splits the embedding too (and the other way round).
  for (const char* name : {"1f1b", "zb-v"}) {
    const ps::GeneratorInfo& g = ps::find_generator(name);
    const ps::Schedule s = g.generate({.ranks = p, .microbatches = 32}, g.default_wgrad);
    const ps::Schedule v = ps::add_vocabulary_passes(s, both);
    EXPECT_EQ(v.count(OpKind::EmbedF), static_cast<std::size_t>(p) * 32) << name;
    const ps::SimulationResult r = ps::simulate(v, both);
    EXPECT_FALSE(r.deadlock) << name;
    const ps::Schedule head_only = ps::add_vocabulary_passes(s, head);
    EXPECT_EQ(head_only.count(OpKind::EmbedF), 0u) << name;
    EXPECT_THROW((void)ps::simulate(head_only, both), ps::invalid_schedule) << name;
    EXPECT_THROW((void)ps::simulate(v, head), ps::invalid_schedule) << name;
    // The step pays the first lookups' reduction and the last broadcast, a few ms of a 15 s
    // step; rank 0 holds the 1/16 of the table the others hold.
    EXPECT_LT(r.makespan, 1.01 * ps::simulate(head_only, head).makespan) << name;
  }
}

// An in-process transport that says it carries no vocabulary messages (as the NCCL transport,
// whose links join neighbouring ranks only).
struct NeighboursOnly : ps::inproc::Transport<pipesched::toy::SyntheticStage::tensor_type> {
  using ps::inproc::Transport<pipesched::toy::SyntheticStage::tensor_type>::Transport;
  static constexpr bool carries_vocabulary = false;
};
static_assert(!ps::vocabulary_transport<NeighboursOnly>);
static_assert(ps::vocabulary_transport<ps::inproc::Transport<float>>);

// The executor runs the passes where it can and refuses them with a sentence where it cannot: a
// transport that carries no vocabulary messages, at construction; training data without the
// vocabulary hooks, at the step (every rank, before its list).
TEST(Vocabulary, TheExecutorNamesWhatItLacksToRunThePasses) {
  using Stage = pipesched::toy::SyntheticStage;
  const ps::GeneratorInfo& g = ps::find_generator("1f1b");
  const ps::Schedule s = ps::add_vocabulary_passes(
      g.generate({.ranks = 2, .microbatches = 2}, g.default_wgrad), ps::UniformCost{});
  const pipesched::toy::SyntheticCost cost{};
  std::vector<Stage> stages(2, Stage(cost));
  NeighboursOnly transport(2);
  try {
    ps::Executor<Stage, NeighboursOnly> e(s, 0, {&stages[0]}, transport);
    ADD_FAILURE() << "the executor took vocabulary passes over a neighbours-only transport";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("carries only messages between neighbouring stages"),
              std::string::npos)
        << e.what();
  }
  ps::inproc::Pipeline<Stage> pipe(s, stages);
  try {
    (void)pipe.step(pipesched::toy::synthetic_training_data());
    ADD_FAILURE() << "a step ran vocabulary passes without their hooks";
  } catch (const ps::execution_error& e) {
    EXPECT_NE(std::string(e.what()).find("set TrainingData::vocabulary"), std::string::npos)
        << e.what();
    EXPECT_EQ(e.position(), -1);
  }
}

}  // namespace test_vocabulary
