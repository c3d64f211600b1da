// The toy GPT's LM head split by vocabulary (toy/gpt_vocabulary.hpp): merged over every shard,
// in any order, the shards' partials give the unsplit head's loss and input gradient, and their
// weight gradients are the rows of its weight gradient (double to 1e-12, float to 1e-5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "pipesched/toy/gpt_head.hpp"
#include "pipesched/toy/gpt_vocabulary.hpp"

namespace test_gpt_vocabulary {

namespace ps = pipesched;
namespace toy = pipesched::toy;

namespace {

template <class T>
struct Reference {
  double loss = 0;
  toy::Tensor<T> dx, dw;
};

// Softmax cross-entropy of X·Wᵀ against the targets, each token's term times `scale`; the
// gradients of X and W (in double).
template <class T>
Reference<T> reference(const toy::Tensor<T>& x, const toy::Tensor<T>& w,
                       const toy::Tensor<T>& targets, double scale) {
  const int n = x.dim(0) * x.dim(1), h = x.dim(2), V = w.dim(0);
  Reference<T> ref{0, toy::Tensor<T>(x.shape), toy::Tensor<T>(w.shape)};
  std::vector<double> dw(w.size(), 0.0);
  for (int r = 0; r < n; ++r) {
    std::vector<double> y(static_cast<std::size_t>(V));
    for (int c = 0; c < V; ++c)
      for (int i = 0; i < h; ++i)
        y[c] += double(x[r * h + i]) * double(w[c * h + i]);
    const double m = *std::max_element(y.begin(), y.end());
    double s = 0;
    for (double v : y)
      s += std::exp(v - m);
    const int label = static_cast<int>(targets[r]);
    ref.loss += (m + std::log(s) - y[label]) * scale;
    for (int c = 0; c < V; ++c) {
      const double d = (std::exp(y[c] - m) / s - (c == label ? 1.0 : 0.0)) * scale;
      for (int i = 0; i < h; ++i) {
        ref.dx[r * h + i] += static_cast<T>(d * double(w[c * h + i]));
        dw[c * h + i] += d * double(x[r * h + i]);
      }
    }
  }
  for (std::size_t k = 0; k < dw.size(); ++k)
    ref.dw[k] = static_cast<T>(dw[k]);
  return ref;
}

template <class T>
void check_split(int shards, bool reverse, double tol) {
  toy::GptConfig config;
  config.hidden = 8;
  config.vocabulary = 13;  // uneven over most shard counts
  config.seed = 7;
  const int b = 2, t = 5, h = config.hidden;
  std::mt19937_64 gen(42);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  toy::Tensor<T> x({b, t, h}), targets({b, t});
  for (auto& v : x.data)
    v = static_cast<T>(u(gen));
  for (std::size_t i = 0; i < targets.size(); ++i)
    targets[i] = static_cast<T>(gen() % static_cast<unsigned>(config.vocabulary));
  const toy::GptHead<T> head(config);
  const toy::Tensor<T>& w = head.parameters()[toy::GptHead<T>::weight];
  const T scale = T(1) / T(3 * b * t);
  const Reference<T> ref = reference(x, w, targets, double(scale));

  std::vector<toy::GptVocabularyShard<T>> parts;
  std::vector<typename toy::GptVocabularyShard<T>::Stash> stash(static_cast<std::size_t>(shards));
  std::vector<toy::VocabularyPartial<T>> partial;
  for (int j = 0; j < shards; ++j) {
    parts.emplace_back(config, j, shards);
    partial.push_back(parts.back().forward(x, targets, stash[static_cast<std::size_t>(j)]));
  }
  std::vector<int> order(static_cast<std::size_t>(shards));
  std::iota(order.begin(), order.end(), 0);
  if (reverse) std::reverse(order.begin(), order.end());
  toy::VocabularyPartial<T> merged = partial[static_cast<std::size_t>(order[0])];
  for (std::size_t k = 1; k < order.size(); ++k)
    merged.merge(partial[static_cast<std::size_t>(order[k])]);
  double loss = 0;
  const toy::Tensor<T> dx = merged.input_gradient(x.shape, scale, loss);
  EXPECT_NEAR(loss, ref.loss, tol * std::max(1.0, std::abs(ref.loss)));
  for (std::size_t i = 0; i < dx.size(); ++i)
    ASSERT_NEAR(double(dx[i]), double(ref.dx[i]), tol) << "dx " << i << " shards " << shards;
  int row = 0;
  for (int j = 0; j < shards; ++j) {
    auto& part = parts[static_cast<std::size_t>(j)];
    EXPECT_EQ(part.rows().first, row);
    // The shard's weights are the head's rows.
    const toy::Tensor<T>& mine = part.parameters()[0];
    for (std::size_t i = 0; i < mine.size(); ++i)
      ASSERT_EQ(mine[i], w[static_cast<std::size_t>(row) * h + i]);
    part.backward_weight(merged, scale, stash[static_cast<std::size_t>(j)]);
    const toy::Tensor<T>& g = part.gradients()[0];
    for (std::size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(double(g[i]), double(ref.dw[static_cast<std::size_t>(row) * h + i]), tol)
          << "dW shard " << j << " of " << shards;
    EXPECT_EQ(part.stash_bytes(stash[static_cast<std::size_t>(j)]), 0u);
    row += part.rows().size;
  }
  EXPECT_EQ(row, config.vocabulary);
}

}  // namespace

TEST(GptVocabulary, ShardsMergedInAnyOrderAreTheWholeHead) {
  for (int shards : {1, 2, 3, 4, 13})
    for (bool reverse : {false, true}) {
      check_split<double>(shards, reverse, 1e-12);
      check_split<float>(shards, reverse, 1e-5);
    }
}

TEST(GptVocabulary, BadSplitsAndCallsAreRefused) {
  EXPECT_THROW((void)toy::vocabulary_rows(13, 13, 13), ps::invalid_problem);
  EXPECT_THROW((void)toy::vocabulary_rows(13, 0, 14), ps::invalid_problem);
  EXPECT_THROW((void)toy::vocabulary_rows(13, -1, 2), ps::invalid_problem);
  const toy::VocabularyRows r = toy::vocabulary_rows(13, 2, 4);  // 4, 3, 3, 3
  EXPECT_EQ(r.first, 7);
  EXPECT_EQ(r.size, 3);
  toy::GptConfig config;
  toy::GptVocabularyShard<double> shard(config, 0, 2);
  toy::GptVocabularyShard<double>::Stash empty;
  toy::VocabularyPartial<double> none;
  EXPECT_THROW(shard.backward_weight(none, 1.0, empty), ps::invalid_problem);
  toy::Tensor<double> x({1, 2, config.hidden}), wrong({1, 3});
  EXPECT_THROW((void)shard.forward(x, wrong, empty), ps::invalid_problem);
}

}  // namespace test_gpt_vocabulary
