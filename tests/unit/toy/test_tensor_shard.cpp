// The toy GPT block's tensor-parallel split: shard_of cuts Megatron-LM's rows and columns and a
// block built for a shard holds exactly them; the shards' parts put back together are the
// whole; shards that do not fit, groups of another shape and a split block without a group
// are refused with what to do. (The numerics of split blocks in a pipeline: tests/mpi.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipesched/toy/gpt.hpp"

namespace test_tensor_shard {

namespace {

namespace ps = pipesched;
namespace toy = pipesched::toy;
using Block = toy::GptBlock<double>;

toy::GptConfig config() {
  return {.vocabulary = 16,
          .hidden = 8,
          .heads = 4,
          .ffn = 12,
          .sequence = 8,
          .blocks = 2,
          .microbatch_size = 2,
          .seed = 5};
}

TEST(TensorShard, ABlockBuiltForAShardHoldsItsCut) {
  const Block whole(config(), 1);
  for (int t : {1, 2, 4})
    for (int r = 0; r < t; ++r) {
      const Block part(config(), 1, {r, t});
      const auto cut = Block::shard_of(whole.parameters(), config(), {r, t});
      ASSERT_EQ(cut.size(), part.parameters().size());
      for (std::size_t i = 0; i < cut.size(); ++i) {
        EXPECT_EQ(cut[i].shape, part.parameters()[i].shape) << "tensor " << i;
        EXPECT_EQ(cut[i].data, part.parameters()[i].data) << "tensor " << i;
      }
    }
}

TEST(TensorShard, TheShardsTogetherAreTheWhole) {
  const Block whole(config(), 0);
  const int t = 2, h = 8, f = 12;
  const auto a = Block::shard_of(whole.parameters(), config(), {0, t});
  const auto b = Block::shard_of(whole.parameters(), config(), {1, t});
  // Wqkv: q, k, v row blocks, each split in two by heads.
  const auto& w = whole.parameters()[Block::qkv_weight];
  EXPECT_EQ(a[Block::qkv_weight].shape, (std::vector<int>{3 * h / t, h}));
  for (int part = 0; part < 3; ++part)
    for (int row = 0; row < h; ++row)
      for (int c = 0; c < h; ++c) {
        const auto& shard = row < h / t ? a : b;
        const int local = part * (h / t) + row % (h / t);
        EXPECT_EQ(shard[Block::qkv_weight].data[local * h + c], w.data[(part * h + row) * h + c]);
      }
  // W2 [hidden, ffn]: columns.
  const auto& w2 = whole.parameters()[Block::fc2_weight];
  for (int row = 0; row < h; ++row)
    for (int c = 0; c < f; ++c) {
      const auto& shard = c < f / t ? a : b;
      EXPECT_EQ(shard[Block::fc2_weight].data[row * (f / t) + c % (f / t)], w2.data[row * f + c]);
    }
  // LayerNorms and the row-parallel biases stay whole.
  for (std::size_t i : {Block::ln1_gamma, Block::out_bias, Block::ln2_beta, Block::fc2_bias})
    EXPECT_EQ(a[i].data, whole.parameters()[i].data);
}

struct FakeGroup final : ps::TensorGroup {
  int n = 2, me = 0;
  int size() const noexcept override { return n; }
  int rank() const noexcept override { return me; }
  void all_reduce(std::span<double>) override {}
  void all_reduce(std::span<float>) override {}
};

TEST(TensorShard, MisfitsAreRefused) {
  auto says = [](auto f, const char* text) {
    try {
      f();
      ADD_FAILURE() << "accepted; expected: " << text;
    } catch (const ps::invalid_problem& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  says([] { Block(config(), 0, {0, 3}); }, "to be multiples of 3");
  says([] { Block(config(), 0, {2, 2}); }, "out of range");
  Block half(config(), 0, {1, 2});
  FakeGroup wrong;  // member 0 of 2
  says([&] { half.set_tensor_group(&wrong); }, "built for tensor shard 1 of 2 but given member 0");
  toy::Tensor<double> x({2, 4, 8});
  Block::Stash st;
  says([&] { (void)half.forward(x, st); }, "given no tensor group");
  // A whole block needs none, and a stage passes its shard to every block.
  Block whole(config(), 0);
  EXPECT_NO_THROW((void)whole.forward(x, st));
  const toy::GptStage<double> stage(config(), 0, 1, {1, 2});
  EXPECT_EQ(stage.tensor_shard(), (ps::TensorShard{1, 2}));
  for (const Block& b : stage.blocks())
    EXPECT_EQ(b.tensor_shard(), (ps::TensorShard{1, 2}));
}

}  // namespace

}  // namespace test_tensor_shard
