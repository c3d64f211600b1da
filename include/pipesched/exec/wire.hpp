// How a tensor crosses a process boundary: a fixed-size header (element type, extents,
// payload bytes) and one contiguous payload the transport sends and receives in place.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace pipesched {

//! The fixed-size description a transport sends ahead of a tensor's payload.
struct WireHeader {
  static constexpr std::uint32_t magic_value = 0x70735731;  // "psW1"
  static constexpr int max_rank = 8;

  std::uint32_t magic = magic_value;
  std::uint32_t element_type = 0;  //!< a code the tensor type chooses (e.g. its element size)
  std::int32_t rank = 0;           //!< number of extents used in `extents`
  std::int32_t reserved = 0;
  std::array<std::int64_t, max_rank> extents{};
  std::uint64_t payload_bytes = 0;  //!< bytes of the payload that follows
};
static_assert(std::is_trivially_copyable_v<WireHeader>);

//! Customization point: specialize `wire<Tensor>` to send `Tensor` between processes.
//! `describe(x)` fills a header; `payload(x)` is the bytes to send; `make(header)` returns a
//! tensor shaped by the header whose `payload(...)` is where the received bytes go (it throws
//! pipesched::error when the header does not describe a tensor of this type).
template <class Tensor>
struct wire;

//! A tensor type a process-crossing transport can move (see `wire`).
template <class Tensor>
concept wire_tensor = requires(const Tensor& cx, Tensor& x, const WireHeader& h) {
  { wire<Tensor>::describe(cx) } -> std::same_as<WireHeader>;
  { wire<Tensor>::payload(cx) } -> std::same_as<std::span<const std::byte>>;
  { wire<Tensor>::payload(x) } -> std::same_as<std::span<std::byte>>;
  { wire<Tensor>::make(h) } -> std::same_as<Tensor>;
};

//! Checks `Tensor` against `wire_tensor` with a readable error.
template <class Tensor>
constexpr bool check_wire_tensor() {
  static_assert(requires { sizeof(wire<Tensor>); },
                "pipesched: this tensor type cannot cross a process boundary: specialize "
                "`pipesched::wire<Tensor>` with describe, payload (const and non-const) and make "
                "(see pipesched/exec/wire.hpp)");
  return wire_tensor<Tensor>;
}

}  // namespace pipesched
