// Numerical kernels the host toy models share (linear, a residual add, GELU, LayerNorm, causal
// attention), forward and hand-written backward, in the element type T; the wider gradient sums
// the models keep; and the checks every toy stash and stage makes (call order, block partition).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipesched/core/error.hpp"
#include "pipesched/toy/tensor.hpp"

namespace pipesched::toy::detail {

// ---- linear: y[n, out] = x[n, in] · W[out, in]ᵀ + b[out] -------------------------------------

template <class T>
void linear_forward(const T* x, const T* w, const T* b, T* y, int n, int in, int out) {
  for (int r = 0; r < n; ++r) {
    const T* xr = x + static_cast<std::ptrdiff_t>(r) * in;
    T* yr = y + static_cast<std::ptrdiff_t>(r) * out;
    for (int o = 0; o < out; ++o) {
      const T* wo = w + static_cast<std::ptrdiff_t>(o) * in;
      T acc = b != nullptr ? b[o] : T(0);
      for (int i = 0; i < in; ++i)
        acc += wo[i] * xr[i];
      yr[o] = acc;
    }
  }
}

// dx[n, in] = dy[n, out] · W[out, in] (overwrites dx).
template <class T>
void linear_backward_input(const T* dy, const T* w, T* dx, int n, int in, int out) {
  for (int r = 0; r < n; ++r) {
    const T* dyr = dy + static_cast<std::ptrdiff_t>(r) * out;
    T* dxr = dx + static_cast<std::ptrdiff_t>(r) * in;
    std::fill(dxr, dxr + in, T(0));
    for (int o = 0; o < out; ++o) {
      const T g = dyr[o];
      const T* wo = w + static_cast<std::ptrdiff_t>(o) * in;
      for (int i = 0; i < in; ++i)
        dxr[i] += g * wo[i];
    }
  }
}

// What a weight gradient's sum over rows accumulates in: double for float models. A call sums
// its rows there and adds the total into the gradient once, as a GEMM accumulates in a wider
// type, so cutting the rows into slices (or microbatches) changes the result by one rounding
// per call, not one per row.
template <class T>
using accumulator_t = std::conditional_t<(sizeof(T) < sizeof(double)), double, T>;

// dW[out, in] += dyᵀ · x and db[out] += Σ_rows dy (db may be null). G is what the gradient is
// kept in: T, or accumulator_t<T> when the caller keeps a wider sum (see GradientSums).
template <class T, class G>
void linear_backward_weight(const T* dy, const T* x, G* dw, G* db, int n, int in, int out) {
  using A = accumulator_t<T>;
  std::vector<A> sum_w(static_cast<std::size_t>(out) * in, A(0));
  std::vector<A> sum_b(db != nullptr ? static_cast<std::size_t>(out) : 0, A(0));
  for (int r = 0; r < n; ++r) {
    const T* dyr = dy + static_cast<std::ptrdiff_t>(r) * out;
    const T* xr = x + static_cast<std::ptrdiff_t>(r) * in;
    for (int o = 0; o < out; ++o) {
      const A g = dyr[o];
      if (db != nullptr) sum_b[static_cast<std::size_t>(o)] += g;
      A* so = sum_w.data() + static_cast<std::ptrdiff_t>(o) * in;
      for (int i = 0; i < in; ++i)
        so[i] += g * A(xr[i]);
    }
  }
  for (std::size_t k = 0; k < sum_w.size(); ++k)
    dw[k] += static_cast<G>(sum_w[k]);
  for (std::size_t o = 0; o < sum_b.size(); ++o)
    db[o] += static_cast<G>(sum_b[o]);
}

// A layer's weight gradients: the T tensors its `gradients()` shows and, for float, a sum in
// accumulator_t<T> per tensor that every contribution adds into. Each tensor is kept equal to
// its sum rounded to T, so a float gradient no longer depends on the order its contributions
// arrive in (slices, weight-gradient parts, microbatch orders) beyond double rounding — what
// mixed-precision training does by keeping gradient sums in a wider type. For double the
// tensors are the sums and nothing is kept twice.
template <class T>
class GradientSums {
 public:
  using sum_type = accumulator_t<T>;

  GradientSums() = default;
  // Zero gradients shaped like `parameters`.
  explicit GradientSums(const std::vector<Tensor<T>>& parameters) {
    for (const Tensor<T>& p : parameters) {
      tensors_.emplace_back(p.shape);
      if constexpr (separate) sums_.emplace_back(p.size(), sum_type(0));
    }
  }

  // Where contributions to tensor `i` add; call `publish(i)` once they are in.
  sum_type* sum(std::size_t i) noexcept {
    if constexpr (separate)
      return sums_[i].data();
    else
      return tensors_[i].begin_data();
  }

  // Rounds the sums of the given tensors into the visible ones.
  void publish(std::initializer_list<std::size_t> indices) {
    if constexpr (separate)
      for (std::size_t i : indices)
        std::transform(sums_[i].begin(), sums_[i].end(), tensors_[i].data.begin(),
                       [](sum_type v) { return static_cast<T>(v); });
  }

  void zero() {
    for (Tensor<T>& t : tensors_)
      t.fill(T(0));
    for (std::vector<sum_type>& s : sums_)
      std::fill(s.begin(), s.end(), sum_type(0));
  }

  std::span<Tensor<T>> tensors() noexcept { return tensors_; }
  std::span<const Tensor<T>> tensors() const noexcept { return tensors_; }

 private:
  static constexpr bool separate = !std::is_same_v<sum_type, T>;
  std::vector<Tensor<T>> tensors_;
  std::vector<std::vector<sum_type>> sums_;  // empty when T is already the sum type
};

// ---- residual: y += x ------------------------------------------------------------------------

template <class T>
void add_into(Tensor<T>& y, const Tensor<T>& x) {
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] += x[i];
}

// ---- GELU (tanh form: smooth everywhere, so finite differences check it) ----------------------

template <class T>
T gelu(T x) {
  const T c = T(0.7978845608028654);  // sqrt(2 / pi)
  const T u = c * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}

template <class T>
T gelu_derivative(T x) {
  const T c = T(0.7978845608028654);
  const T x2 = x * x;
  const T t = std::tanh(c * (x + T(0.044715) * x * x2));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * x2);
}

// ---- LayerNorm over rows of width h: y = x̂·γ + β, x̂ = (x − mean)·rstd -------------------------

inline constexpr double layer_norm_epsilon = 1e-5;

template <class T>
void layer_norm_forward(const T* x, const T* gamma, const T* beta, T* xhat, T* rstd, T* y, int n,
                        int h) {
  for (int r = 0; r < n; ++r) {
    const T* xr = x + static_cast<std::ptrdiff_t>(r) * h;
    T* xh = xhat + static_cast<std::ptrdiff_t>(r) * h;
    T* yr = y + static_cast<std::ptrdiff_t>(r) * h;
    T mean = 0;
    for (int i = 0; i < h; ++i)
      mean += xr[i];
    mean /= T(h);
    T var = 0;
    for (int i = 0; i < h; ++i)
      var += (xr[i] - mean) * (xr[i] - mean);
    var /= T(h);
    const T rs = T(1) / std::sqrt(var + T(layer_norm_epsilon));
    rstd[r] = rs;
    for (int i = 0; i < h; ++i) {
      xh[i] = (xr[i] - mean) * rs;
      yr[i] = xh[i] * gamma[i] + beta[i];
    }
  }
}

// y = x̂·γ + β from a kept x̂ (the weight pass rebuilds a LayerNorm output this way instead of
// keeping it: the same operations, so the same bits).
template <class T>
void layer_norm_apply(const T* xhat, const T* gamma, const T* beta, T* y, int n, int h) {
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < h; ++i) {
      const std::ptrdiff_t k = static_cast<std::ptrdiff_t>(r) * h + i;
      y[k] = xhat[k] * gamma[i] + beta[i];
    }
}

// dx = rstd · (dx̂ − mean(dx̂) − x̂ · mean(dx̂ ⊙ x̂)), dx̂ = dy ⊙ γ (overwrites dx).
template <class T>
void layer_norm_backward_input(const T* dy, const T* xhat, const T* rstd, const T* gamma, T* dx,
                               int n, int h) {
  for (int r = 0; r < n; ++r) {
    const T* dyr = dy + static_cast<std::ptrdiff_t>(r) * h;
    const T* xh = xhat + static_cast<std::ptrdiff_t>(r) * h;
    T* dxr = dx + static_cast<std::ptrdiff_t>(r) * h;
    T mean_d = 0;
    T mean_dx = 0;
    for (int i = 0; i < h; ++i) {
      const T d = dyr[i] * gamma[i];
      mean_d += d;
      mean_dx += d * xh[i];
    }
    mean_d /= T(h);
    mean_dx /= T(h);
    for (int i = 0; i < h; ++i)
      dxr[i] = rstd[r] * (dyr[i] * gamma[i] - mean_d - xh[i] * mean_dx);
  }
}

// dγ += Σ_rows dy ⊙ x̂, dβ += Σ_rows dy (summed in accumulator_t, added once; G as in
// linear_backward_weight).
template <class T, class G>
void layer_norm_backward_weight(const T* dy, const T* xhat, G* dgamma, G* dbeta, int n, int h) {
  using A = accumulator_t<T>;
  std::vector<A> sum_g(static_cast<std::size_t>(h), A(0)), sum_b(static_cast<std::size_t>(h), A(0));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < h; ++i) {
      const std::ptrdiff_t k = static_cast<std::ptrdiff_t>(r) * h + i;
      sum_g[static_cast<std::size_t>(i)] += A(dy[k]) * A(xhat[k]);
      sum_b[static_cast<std::size_t>(i)] += A(dy[k]);
    }
  for (int i = 0; i < h; ++i) {
    dgamma[i] += static_cast<G>(sum_g[static_cast<std::size_t>(i)]);
    dbeta[i] += static_cast<G>(sum_b[static_cast<std::size_t>(i)]);
  }
}

// ---- causal multi-head attention ---------------------------------------------------------------
//
// Queries and keys/values are separate operands on purpose: query i sits at position
// `query_offset + i` and attends to keys 0 … query_offset + i, so keys and values of an earlier
// part of the sequence (a prefix held elsewhere) can be passed in front of the current ones.
// With the whole sequence at once, keys == queries and query_offset == 0.

struct AttentionShape {
  int queries = 0;       // query rows
  int keys = 0;          // key/value rows (≥ query_offset + queries)
  int query_offset = 0;  // position of query 0 among the keys
  int heads = 1;
  int head_dim = 1;
};

// For one sequence: q rows have stride q_stride, k and v rows kv_stride, head `hd` occupies
// columns [hd·head_dim, (hd+1)·head_dim). Writes the probabilities p[heads, queries, keys]
// (zero where masked) and out[queries, heads·head_dim] (row stride out_stride).
template <class T>
void causal_attention_forward(const T* q, int q_stride, const T* k, const T* v, int kv_stride, T* p,
                              T* out, int out_stride, const AttentionShape& s) {
  const T scale = T(1) / std::sqrt(T(s.head_dim));
  for (int hd = 0; hd < s.heads; ++hd) {
    const int col = hd * s.head_dim;
    for (int i = 0; i < s.queries; ++i) {
      const T* qi = q + static_cast<std::ptrdiff_t>(i) * q_stride + col;
      T* pi = p + (static_cast<std::ptrdiff_t>(hd) * s.queries + i) * s.keys;
      const int last = s.query_offset + i;  // the causal mask: keys after the query are hidden
      T max_score = -std::numeric_limits<T>::infinity();
      for (int j = 0; j <= last; ++j) {
        const T* kj = k + static_cast<std::ptrdiff_t>(j) * kv_stride + col;
        T dot = 0;
        for (int d = 0; d < s.head_dim; ++d)
          dot += qi[d] * kj[d];
        pi[j] = dot * scale;
        max_score = std::max(max_score, pi[j]);
      }
      T sum = 0;
      for (int j = 0; j <= last; ++j) {
        pi[j] = std::exp(pi[j] - max_score);
        sum += pi[j];
      }
      for (int j = 0; j <= last; ++j)
        pi[j] /= sum;
      for (int j = last + 1; j < s.keys; ++j)
        pi[j] = T(0);
      T* oi = out + static_cast<std::ptrdiff_t>(i) * out_stride + col;
      for (int d = 0; d < s.head_dim; ++d)
        oi[d] = T(0);
      for (int j = 0; j <= last; ++j) {
        const T* vj = v + static_cast<std::ptrdiff_t>(j) * kv_stride + col;
        for (int d = 0; d < s.head_dim; ++d)
          oi[d] += pi[j] * vj[d];
      }
    }
  }
}

// Adds the gradients of q, k and v (same layouts and strides as their operands: dq like q, dk
// and dv like k and v) given dout and the probabilities of the forward. Accumulates, so the
// gradients of prefix keys/values held elsewhere can be gathered across calls. dk and dv sum
// over queries, which a sequence cut into slices visits in another order (later slices first),
// so they are kept in A — accumulator_t<T> for float — and rounded to T once by the caller; a
// query's dq sums over keys in the same order however the sequence is cut and stays in T.
template <class T, class A>
void causal_attention_backward(const T* dout, int dout_stride, const T* q, int q_stride, const T* k,
                               const T* v, int kv_stride, const T* p, T* dq, A* dk, A* dv,
                               const AttentionShape& s) {
  const T scale = T(1) / std::sqrt(T(s.head_dim));
  std::vector<T> dp(static_cast<std::size_t>(s.keys));
  for (int hd = 0; hd < s.heads; ++hd) {
    const int col = hd * s.head_dim;
    for (int i = 0; i < s.queries; ++i) {
      const T* pi = p + (static_cast<std::ptrdiff_t>(hd) * s.queries + i) * s.keys;
      const T* doi = dout + static_cast<std::ptrdiff_t>(i) * dout_stride + col;
      const T* qi = q + static_cast<std::ptrdiff_t>(i) * q_stride + col;
      T* dqi = dq + static_cast<std::ptrdiff_t>(i) * q_stride + col;
      const int last = s.query_offset + i;
      T weighted = 0;  // Σ_j p_ij · dp_ij, the softmax backward's correction
      for (int j = 0; j <= last; ++j) {
        const T* vj = v + static_cast<std::ptrdiff_t>(j) * kv_stride + col;
        T dot = 0;
        for (int d = 0; d < s.head_dim; ++d)
          dot += doi[d] * vj[d];
        dp[static_cast<std::size_t>(j)] = dot;
        weighted += pi[j] * dot;
      }
      for (int j = 0; j <= last; ++j) {
        const std::ptrdiff_t row = static_cast<std::ptrdiff_t>(j) * kv_stride + col;
        const T ds = pi[j] * (dp[static_cast<std::size_t>(j)] - weighted) * scale;
        for (int d = 0; d < s.head_dim; ++d) {
          dqi[d] += ds * k[row + d];
          dk[row + d] += A(ds) * A(qi[d]);
          dv[row + d] += A(pi[j]) * A(doi[d]);
        }
      }
    }
  }
}

// ---- call-order checks shared by every toy stash ---------------------------------------------

// Where a stash is in its life: empty, holding a forward's activations, or holding what the
// weight gradient still needs after backward_input.
enum class StashPhase : std::uint8_t { Empty, Forwarded, InputDone };

inline void require_phase(StashPhase actual, StashPhase wanted, const char* who, const char* op) {
  if (actual == wanted) return;
  std::string what = std::string(who) + "::" + op + ": ";
  if (wanted == StashPhase::Forwarded)
    what += actual == StashPhase::Empty
                ? "the stash holds no forward; call forward for this microbatch first"
                : "backward_input already ran on this stash; call backward_weight next";
  else
    what += actual == StashPhase::Empty
                ? "the stash is empty; backward_weight needs backward_input to run first"
                : "backward_input has not run on this stash yet; call it before backward_weight";
  throw invalid_schedule(what);
}

// ---- weight gradients in parts --------------------------------------------------------------

// A stage's weight-gradient work is a list of `pieces` (one per weight GEMM, say); part `part`
// of `parts` runs pieces [part·pieces/parts, (part+1)·pieces/parts), so any part count covers
// every piece once (parts beyond the piece count are empty). Records the part in `done` (one
// flag per part, sized at the first part) and returns its pieces; throws when the part is out
// of range, already ran, or the unit was cut another way before.
inline std::pair<int, int> begin_weight_part(std::vector<char>& done, int part, int parts,
                                             int pieces, const char* who) {
  if (parts < 1 || part < 0 || part >= parts)
    throw invalid_problem(std::string(who) + "::backward_weight: part " + std::to_string(part) +
                          " of " + std::to_string(parts) +
                          " parts is out of range; parts must be at least 1 and part between 0 "
                          "and parts - 1");
  if (done.empty()) {
    done.assign(static_cast<std::size_t>(parts), 0);
  } else if (done.size() != static_cast<std::size_t>(parts)) {
    throw invalid_schedule(std::string(who) +
                           "::backward_weight: this stash's weight gradient "
                           "was cut into " +
                           std::to_string(done.size()) + " parts, now into " +
                           std::to_string(parts) + "; cut every part of one unit the same way");
  }
  if (done[static_cast<std::size_t>(part)] != 0)
    throw invalid_schedule(std::string(who) + "::backward_weight: part " + std::to_string(part) +
                           " of " + std::to_string(parts) +
                           " already ran on this stash; each part runs once");
  done[static_cast<std::size_t>(part)] = 1;
  const auto first = static_cast<long long>(part) * pieces / parts;
  const auto last = static_cast<long long>(part + 1) * pieces / parts;
  return {static_cast<int>(first), static_cast<int>(last)};
}

inline bool all_parts_done(const std::vector<char>& done) {
  return std::all_of(done.begin(), done.end(), [](char d) { return d != 0; });
}

// Sums `pieces` (bytes each weight-gradient piece frees, in order) into what each of `parts`
// parts frees, by the split begin_weight_part uses.
inline std::vector<std::size_t> part_bytes(const std::vector<std::size_t>& pieces, int parts,
                                           const char* who) {
  if (parts < 1)
    throw invalid_problem(std::string(who) + "::weight_part_bytes: parts is " +
                          std::to_string(parts) + "; it must be at least 1");
  const auto n = static_cast<long long>(pieces.size());
  std::vector<std::size_t> out(static_cast<std::size_t>(parts), 0);
  for (int p = 0; p < parts; ++p)
    for (long long i = p * n / parts; i < (p + 1) * n / parts; ++i)
      out[static_cast<std::size_t>(p)] += pieces[static_cast<std::size_t>(i)];
  return out;
}

// ---- partition of the global block list over stages ------------------------------------------

// Blocks [first, last) of stage `stage` when `blocks` blocks are split over `stages` stages as
// evenly as possible, earlier stages taking the remainder. Throws when the split is impossible.
inline std::pair<int, int> block_range(int blocks, int stage, int stages, const char* model) {
  if (blocks < 1)
    throw invalid_problem(std::string(model) + ": blocks is " + std::to_string(blocks) +
                          "; a model needs at least 1 block");
  if (stages < 1 || stages > blocks)
    throw invalid_problem(std::string(model) + ": stages is " + std::to_string(stages) + "; with " +
                          std::to_string(blocks) + " blocks it must be between 1 and " +
                          std::to_string(blocks) +
                          " (every stage needs a block; raise blocks for more stages)");
  if (stage < 0 || stage >= stages)
    throw invalid_problem(std::string(model) + ": stage is " + std::to_string(stage) +
                          "; it must be between 0 and " + std::to_string(stages - 1));
  const int base = blocks / stages;
  const int extra = blocks % stages;
  const int first = stage * base + std::min(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

inline void require_positive(int value, const char* model, const char* name) {
  if (value < 1)
    throw invalid_problem(std::string(model) + ": " + name + " is " + std::to_string(value) +
                          "; it must be at least 1");
}

}  // namespace pipesched::toy::detail
