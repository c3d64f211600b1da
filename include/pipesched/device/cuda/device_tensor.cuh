// DeviceTensor: a shape and a contiguous row-major buffer in GPU memory, allocated from the
// device's stream-ordered pool on the stream that writes it and freed on the stream that last
// used it (the owner re-associates it when it hands the tensor to another stream).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/device/cuda/check.cuh"
#include "pipesched/exec/wire.hpp"

namespace pipesched {

//! A GPU tensor owned by one stream at a time. Move-only; `clone` copies on the GPU.
template <class T>
class DeviceTensor {
 public:
  using value_type = T;  //!< the element type

  DeviceTensor() = default;
  //! Uninitialized elements, allocated in stream order on `stream`.
  DeviceTensor(std::vector<int> shape, cudaStream_t stream)
      : shape_(std::move(shape)), stream_(stream) {
    size_ = element_count(shape_);
    if (size_ > 0)
      PIPESCHED_CUDA_CHECK(
          cudaMallocAsync(reinterpret_cast<void**>(&data_), size_ * sizeof(T), stream_));
  }
  //! Zero-filled elements.
  static DeviceTensor zeros(std::vector<int> shape, cudaStream_t stream) {
    DeviceTensor t(std::move(shape), stream);
    if (t.size_ > 0) PIPESCHED_CUDA_CHECK(cudaMemsetAsync(t.data_, 0, t.bytes(), stream));
    return t;
  }
  //! A copy of host values (`values.size()` must be the shape's element count).
  static DeviceTensor from_host(std::vector<int> shape, const std::vector<T>& values,
                                cudaStream_t stream) {
    DeviceTensor t(std::move(shape), stream);
    if (values.size() != t.size_)
      throw error("DeviceTensor::from_host: " + std::to_string(values.size()) +
                  " values for a shape of " + std::to_string(t.size_) + " elements.");
    if (t.size_ > 0)
      PIPESCHED_CUDA_CHECK(
          cudaMemcpyAsync(t.data_, values.data(), t.bytes(), cudaMemcpyHostToDevice, stream));
    // The host vector may go away once this returns.
    PIPESCHED_CUDA_CHECK(cudaStreamSynchronize(stream));
    return t;
  }

  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  //! Takes `o`'s memory and stream; `o` is left empty.
  DeviceTensor(DeviceTensor&& o) noexcept
      : shape_(std::move(o.shape_)),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        stream_(o.stream_),
        offloaded_(std::exchange(o.offloaded_, false)) {}
  //! Frees this tensor's memory (in its stream's order) and takes `o`'s; `o` is left empty.
  DeviceTensor& operator=(DeviceTensor&& o) noexcept {
    if (this != &o) {
      release();
      shape_ = std::move(o.shape_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      stream_ = o.stream_;
      offloaded_ = std::exchange(o.offloaded_, false);
    }
    return *this;
  }
  ~DeviceTensor() { release(); }

  //! A copy on the GPU, ordered on `stream` (which must already see this tensor's data).
  DeviceTensor clone(cudaStream_t stream) const {
    DeviceTensor t(shape_, stream);
    if (size_ > 0)
      PIPESCHED_CUDA_CHECK(
          cudaMemcpyAsync(t.data_, data_, bytes(), cudaMemcpyDeviceToDevice, stream));
    return t;
  }

  //! The elements, copied to the host (waits for this tensor's stream).
  std::vector<T> to_host() const {
    std::vector<T> v(size_);
    if (size_ > 0) {
      PIPESCHED_CUDA_CHECK(
          cudaMemcpyAsync(v.data(), data_, bytes(), cudaMemcpyDeviceToHost, stream_));
      PIPESCHED_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    return v;
  }

  //! The elements in device memory (null when empty).
  T* data() noexcept { return data_; }
  //! The elements in device memory (null when empty).
  const T* data() const noexcept { return data_; }
  //! The number of elements.
  std::size_t size() const noexcept { return size_; }
  //! Bytes of the elements (what the stash accounting counts).
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  //! The extents, outermost first.
  const std::vector<int>& shape() const noexcept { return shape_; }
  //! The number of extents.
  int rank() const noexcept { return static_cast<int>(shape_.size()); }
  //! Extent `i` (precondition: 0 <= i < rank()).
  int dim(int i) const noexcept { return shape_[static_cast<std::size_t>(i)]; }
  //! True when the tensor has no elements.
  bool empty() const noexcept { return size_ == 0; }

  //! Queues a copy of the elements into `to` (pinned host memory of at least bytes()) on
  //! `copy`, which must already see them (ordered after their last writer), and frees the device
  //! memory in `copy`'s order: the tensor keeps its extents and holds no memory (empty(), and
  //! offloaded()) until `reload`. Nothing for an empty tensor.
  void offload(void* to, cudaStream_t copy) {
    if (size_ == 0) return;
    PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(to, data_, bytes(), cudaMemcpyDeviceToHost, copy));
    PIPESCHED_CUDA_CHECK(cudaFreeAsync(data_, copy));
    data_ = nullptr;
    size_ = 0;
    offloaded_ = true;
  }
  //! Takes device memory again on `copy` and queues the copy of the elements back from `from`
  //! (what offload wrote, which must stay until that copy has run); the tensor then belongs to
  //! `stream`, which the caller orders after `copy` before it reads the tensor. Nothing for a
  //! tensor not offloaded.
  void reload(const void* from, cudaStream_t copy, cudaStream_t stream) {
    if (!offloaded_) return;
    offloaded_ = false;
    size_ = element_count(shape_);
    PIPESCHED_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&data_), bytes(), copy));
    PIPESCHED_CUDA_CHECK(cudaMemcpyAsync(data_, from, bytes(), cudaMemcpyHostToDevice, copy));
    stream_ = stream;
  }
  //! True between offload and reload: the elements are in host memory.
  bool offloaded() const noexcept { return offloaded_; }
  //! Bytes the elements take wherever they are (bytes() while on the device, the same in host
  //! memory while offloaded).
  std::size_t element_bytes() const noexcept { return element_count(shape_) * sizeof(T); }

  //! The stream that owns the tensor: its memory is freed in that stream's order.
  cudaStream_t stream() const noexcept { return stream_; }
  //! Hands the tensor to `stream`; the caller has ordered `stream` after every earlier use.
  void set_stream(cudaStream_t stream) noexcept { stream_ = stream; }

  //! The elements a tensor of `extents` has: their product, negative extents counted as 0; 0
  //! for no extents.
  static std::size_t element_count(const std::vector<int>& extents) noexcept {
    if (extents.empty()) return 0;
    std::size_t n = 1;
    for (int e : extents)
      n *= static_cast<std::size_t>(e > 0 ? e : 0);
    return n;
  }

 private:
  void release() noexcept {
    if (data_) cudaFreeAsync(data_, stream_);
    data_ = nullptr;
    size_ = 0;
  }

  std::vector<int> shape_;
  T* data_ = nullptr;
  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
  bool offloaded_ = false;  // the elements are in host memory (offload, until reload)
};

//! Page-locked host memory (cudaMallocHost), which copies to and from the device reach at the
//! link's speed and which asynchronous copies need: where offloaded activations wait.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  //! `bytes` of page-locked host memory; throws cuda_error when the runtime cannot pin them.
  explicit PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) PIPESCHED_CUDA_CHECK(cudaMallocHost(&data_, bytes_));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  //! Takes `o`'s memory; `o` is left empty.
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  //! Frees this buffer's memory and takes `o`'s.
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      if (data_) cudaFreeHost(data_);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~PinnedBuffer() {
    if (data_) cudaFreeHost(data_);
  }
  //! The memory (null when empty).
  void* data() const noexcept { return data_; }
  //! Its size in bytes.
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

//! DeviceTensor crosses processes as its extents and its elements; `make` allocates on the
//! default stream's order (a transport re-associates it with its receive stream).
template <class T>
struct wire<DeviceTensor<T>> {
  //! The header's element type: 0x10000 + the element size, + 0x100 for floating point.
  static constexpr std::uint32_t code =
      0x10000u + sizeof(T) + (std::is_floating_point_v<T> ? 0x100u : 0u);

  //! The header of `x`: its element type, extents and bytes.
  static WireHeader describe(const DeviceTensor<T>& x) {
    return detail::wire_header(code, x.shape(), x.bytes(), "DeviceTensor");
  }
  //! Device memory: only a GPU-aware transport may read it.
  static std::span<const std::byte> payload(const DeviceTensor<T>& x) {
    return {reinterpret_cast<const std::byte*>(x.data()), x.bytes()};
  }
  //! Device memory the received bytes go to: only a GPU-aware transport may write it.
  static std::span<std::byte> payload(DeviceTensor<T>& x) {
    return {reinterpret_cast<std::byte*>(x.data()), x.bytes()};
  }
  //! An uninitialized tensor shaped by `h`, allocated in `stream`'s order; throws
  //! pipesched::error when `h` does not describe a DeviceTensor of this element type.
  static DeviceTensor<T> make(const WireHeader& h, cudaStream_t stream = nullptr) {
    DeviceTensor<T> x(detail::wire_extents(h, code, "DeviceTensor of this element type"), stream);
    detail::check_wire_bytes(h, x.bytes());
    return x;
  }
};

}  // namespace pipesched
