// Numerical kernels the host toy models share (linear, GELU, LayerNorm, a residual add), forward
// and hand-written backward, in the element type T, and the wider gradient sums the models keep.
// Causal attention is in toy/detail/attention.hpp; the checks and counts every toy layer and stage
// makes, host or GPU, in toy/detail/layer_bookkeeping.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <type_traits>
#include <vector>

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

}  // namespace pipesched::toy::detail
