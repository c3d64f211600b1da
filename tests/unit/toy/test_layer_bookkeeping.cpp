// The bookkeeping the host toy layers and their CUDA twins share
// (toy/detail/layer_bookkeeping.hpp): a layer's weight pieces (which exist, each runs once, the
// stash empties after the last), how a stage's parts cover its pieces, the slice context's
// key/value prefix, and the host layers refusing a piece out of range. The GPU layers call the same
// functions under their gpu:: names, so what is checked here with those names is what they refuse
// (tests/cuda runs them on a GPU).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/toy/detail/layer_bookkeeping.hpp"
#include "pipesched/toy/gpt_layers.hpp"
#include "pipesched/toy/mlp.hpp"
#include "pipesched/toy/tensor.hpp"

namespace test_layer_bookkeeping {

namespace ps = pipesched;
namespace toy = pipesched::toy;
namespace detail = pipesched::toy::detail;

namespace {

// The message of the exception `fn` throws as `E`; fails the test when it throws nothing.
template <class E, class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

// What a layer's stash keeps for its weight pieces, and a tensor that shows whether it was
// emptied.
struct PieceStash {
  int pieces_done = 0;
  detail::StashPhase phase = detail::StashPhase::Empty;
  std::vector<int> held;
};

}  // namespace

// ---- a layer's weight pieces ---------------------------------------------------------------

TEST(LayerBookkeeping, WeightPieceOutOfRangeOrRepeatedIsRefused) {
  EXPECT_NO_THROW(detail::check_weight_piece(0, 0, 4, "GptBlock"));
  EXPECT_NO_THROW(detail::check_weight_piece(0b0111, 3, 4, "GptBlock"));
  EXPECT_EQ(
      message_of<ps::invalid_problem>([] { detail::check_weight_piece(0, 4, 4, "GptBlock"); }),
      "GptBlock::backward_weight_piece: piece is 4; it must be between 0 and 3");
  EXPECT_EQ(message_of<ps::invalid_problem>(
                [] { detail::check_weight_piece(0, -1, 2, "gpu::MlpBlock"); }),
            "gpu::MlpBlock::backward_weight_piece: piece is -1; it must be between 0 and 1");
  EXPECT_EQ(
      message_of<ps::invalid_schedule>([] { detail::check_weight_piece(0b100, 2, 4, "GptBlock"); }),
      "GptBlock::backward_weight_piece: piece 2 already ran on this stash; each piece runs once");
}

TEST(LayerBookkeeping, RunWeightPieceChecksBeforeTheWorkAndEmptiesTheStashAfterTheLast) {
  // What gpu::GptBlock::backward_weight_piece runs: the same checks as the host block's, under
  // its own name, before any work is enqueued.
  std::vector<int> ran;
  auto run = [&](int piece) { ran.push_back(piece); };
  PieceStash st;
  EXPECT_THROW(detail::run_weight_piece(st, 0, 4, "gpu::GptBlock", run), ps::invalid_schedule);
  st.phase = detail::StashPhase::InputDone;
  st.held = {1, 2, 3};
  for (int piece : {4, -1, 99})
    EXPECT_EQ(message_of<ps::invalid_problem>(
                  [&] { detail::run_weight_piece(st, piece, 4, "gpu::GptBlock", run); }),
              "gpu::GptBlock::backward_weight_piece: piece is " + std::to_string(piece) +
                  "; it must be between 0 and 3");
  EXPECT_TRUE(ran.empty());
  EXPECT_EQ(st.pieces_done, 0);
  for (int piece : {2, 0, 3})
    detail::run_weight_piece(st, piece, 4, "gpu::GptBlock", run);
  EXPECT_EQ(st.pieces_done, 0b1101);
  EXPECT_EQ(st.held.size(), 3u);  // one piece left: the stash still holds what it needs
  EXPECT_THROW(detail::run_weight_piece(st, 3, 4, "gpu::GptBlock", run), ps::invalid_schedule);
  detail::run_weight_piece(st, 1, 4, "gpu::GptBlock", run);
  EXPECT_EQ(ran, (std::vector<int>{2, 0, 3, 1}));
  EXPECT_EQ(st.phase, detail::StashPhase::Empty);
  EXPECT_TRUE(st.held.empty());
}

TEST(LayerBookkeeping, RemainingWeightPiecesRunInOrder) {
  std::vector<int> ran;
  PieceStash st{.pieces_done = 0b0101, .phase = detail::StashPhase::InputDone, .held = {7}};
  detail::run_remaining_weight_pieces(st, 4, "GptBlock", [&](int piece) { ran.push_back(piece); });
  EXPECT_EQ(ran, (std::vector<int>{1, 3}));
  EXPECT_EQ(st.pieces_done, 0);
  EXPECT_TRUE(st.held.empty());
  EXPECT_THROW(detail::run_remaining_weight_pieces(st, 4, "GptBlock", [](int) {}),
               ps::invalid_schedule);
}

// ---- a stage's parts over its pieces ---------------------------------------------------------

TEST(LayerBookkeeping, StagePiecesRunHeadThenBlocksLastToFirstThenEmbedding) {
  using Layer = detail::StagePiece::Layer;
  // Head, three blocks of four pieces, embedding: 14 pieces.
  EXPECT_EQ(detail::stage_weight_pieces(true, 3, 4, true), 14);
  EXPECT_EQ(detail::stage_weight_pieces(false, 3, 2, false), 6);
  std::vector<detail::StagePiece> order;
  for (int piece = 0; piece < 14; ++piece)
    order.push_back(detail::stage_weight_piece(piece, true, 3, 4, true));
  EXPECT_EQ(order.front().layer, Layer::Head);
  EXPECT_EQ(order.back().layer, Layer::Embedding);
  for (int piece = 1; piece <= 12; ++piece) {
    SCOPED_TRACE("piece " + std::to_string(piece));
    EXPECT_EQ(order[piece].layer, Layer::Block);
    EXPECT_EQ(order[piece].block, static_cast<std::size_t>(2 - (piece - 1) / 4));
    EXPECT_EQ(order[piece].piece, (piece - 1) % 4);
  }
  // Without head and embedding the blocks' pieces start at 0 and nothing lies past them.
  const detail::StagePiece first = detail::stage_weight_piece(0, false, 3, 2, false);
  EXPECT_EQ(first.layer, Layer::Block);
  EXPECT_EQ(first.block, 2u);
  EXPECT_EQ(first.piece, 0);
  EXPECT_EQ(detail::stage_weight_piece(6, false, 3, 2, false).layer, Layer::None);
}

TEST(LayerBookkeeping, PartsCoverEveryPieceOnce) {
  for (int pieces : {1, 6, 14})
    for (int parts : {1, 2, 3, pieces, pieces + 3}) {
      SCOPED_TRACE(std::to_string(pieces) + " pieces in " + std::to_string(parts) + " parts");
      struct {
        std::vector<char> parts_done;
        int marker = 0;  // 1 while the stash holds something
      } st;
      st.marker = 1;
      std::vector<int> seen(static_cast<std::size_t>(pieces), 0);
      for (int part = parts; part-- > 0;) {
        EXPECT_EQ(st.marker, 1);  // emptied only after the last part
        detail::run_weight_part(st, part, parts, pieces, "GptStage",
                                [&](int piece) { ++seen[static_cast<std::size_t>(piece)]; });
      }
      EXPECT_EQ(seen, std::vector<int>(static_cast<std::size_t>(pieces), 1));
      EXPECT_TRUE(st.parts_done.empty());
      EXPECT_EQ(st.marker, 0);
    }
}

// ---- the slice context's keys/values -------------------------------------------------------

TEST(LayerBookkeeping, KeyValuePrefixIsCheckedSliceBySlice) {
  toy::GptBlock<double>::Context context;
  detail::key_value_slot(context, 1) = toy::Tensor<double>({2, 3, 4}, 1.0);
  EXPECT_EQ(context.kv.size(), 2u);
  EXPECT_EQ(context.dkv.size(), 2u);
  EXPECT_EQ(message_of<ps::invalid_schedule>([&] {
              detail::check_key_value_prefix(context, 1, 3, 2, 3, "gpu::GptBlock", "forward");
            }),
            "gpu::GptBlock::forward: slice 1 needs the keys/values of slice 0, which the slice "
            "context does not hold; a microbatch's slices run their forwards first to last and "
            "their backwards last to first");
  detail::key_value_slot(context, 0) = toy::Tensor<double>({2, 3, 4}, 1.0);
  EXPECT_EQ(detail::check_key_value_prefix(context, 1, 3, 2, 3, "GptBlock", "forward"), 6);
  EXPECT_THROW(detail::check_key_value_prefix(context, 1, 2, 2, 3, "GptBlock", "forward"),
               ps::invalid_problem);  // the earlier slice holds 3 tokens, not 2
  EXPECT_THROW(detail::check_key_value_prefix(context, 1, 3, 1, 3, "GptBlock", "forward"),
               ps::invalid_problem);  // another batch
  std::vector<int> starts;
  detail::for_each_earlier_slice(context, 1, [&](const auto&, auto& gradients, int start) {
    EXPECT_TRUE(gradients.empty());
    starts.push_back(start);
  });
  EXPECT_EQ(starts, std::vector<int>{0});
  EXPECT_EQ(detail::later_key_value_gradients(&context, 0), nullptr);
  context.dkv[0] = toy::Tensor<double>({2, 3, 4});
  EXPECT_EQ(detail::later_key_value_gradients(&context, 0), &context.dkv[0]);
  EXPECT_EQ(detail::key_value_bytes(context), 3 * 24 * sizeof(double));
  detail::release_slice(context, 0);
  EXPECT_TRUE(context.kv[0].empty());
  EXPECT_TRUE(context.dkv[0].empty());
  EXPECT_EQ(detail::key_value_bytes(context), 24 * sizeof(double));
}

// ---- the host layers refuse a piece out of range ---------------------------------------------

namespace {

template <class Layer>
struct Refusal;
template <class T>
struct Refusal<toy::MlpBlock<T>> {
  static toy::MlpBlock<T> make() { return toy::MlpBlock<T>(toy::MlpConfig{}, 0); }
  static toy::Tensor<T> input() { return toy::Tensor<T>({3, toy::MlpConfig{}.hidden}, T(0.25)); }
  static constexpr const char* name = "MlpBlock";
};
template <class T>
struct Refusal<toy::GptBlock<T>> {
  static toy::GptBlock<T> make() { return toy::GptBlock<T>(toy::GptConfig{}, 0); }
  static toy::Tensor<T> input() { return toy::Tensor<T>({2, 5, toy::GptConfig{}.hidden}, T(0.25)); }
  static constexpr const char* name = "GptBlock";
};

template <class Layer>
class LayerWeightPieces : public ::testing::Test {};
using Layers = ::testing::Types<toy::MlpBlock<float>, toy::MlpBlock<double>, toy::GptBlock<float>,
                                toy::GptBlock<double>>;
TYPED_TEST_SUITE(LayerWeightPieces, Layers);

}  // namespace

TYPED_TEST(LayerWeightPieces, OutOfRangePieceIsRefusedAndTheStashKept) {
  using R = Refusal<TypeParam>;
  TypeParam layer = R::make();
  typename TypeParam::stash_type st;
  const auto y = layer.forward(R::input(), st);
  layer.backward_input(decltype(y)(y.shape, 0.5), st);
  const std::size_t held = layer.stash_bytes(st);
  const int pieces = TypeParam::weight_pieces;
  for (int piece : {pieces, -1}) {
    SCOPED_TRACE("piece " + std::to_string(piece));
    EXPECT_EQ(message_of<ps::invalid_problem>([&] { layer.backward_weight_piece(st, piece); }),
              std::string(R::name) + "::backward_weight_piece: piece is " + std::to_string(piece) +
                  "; it must be between 0 and " + std::to_string(pieces - 1));
    EXPECT_EQ(layer.stash_bytes(st), held);
  }
  for (int piece = pieces; piece-- > 0;)
    layer.backward_weight_piece(st, piece);
  EXPECT_EQ(layer.stash_bytes(st), 0u);
  EXPECT_THROW(layer.backward_weight_piece(st, 0), ps::invalid_schedule);  // the stash is spent
}

}  // namespace test_layer_bookkeeping
