// How a tensor crosses a process boundary: a fixed-size header (element type, extents,
// payload bytes) and one contiguous payload the transport sends and receives in place.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pipesched/core/error.hpp"

namespace pipesched {

//! The fixed-size description a transport sends ahead of a tensor's payload.
struct WireHeader {
  //! What `magic` holds in a pipesched header: "psW1".
  static constexpr std::uint32_t magic_value = 0x70735731;
  static constexpr int max_rank = 8;  //!< the most extents a tensor sent may have

  std::uint32_t magic = magic_value;  //!< `magic_value`; anything else is not a header
  std::uint32_t element_type = 0;     //!< a code the tensor type chooses (e.g. its element size)
  std::int32_t rank = 0;              //!< number of extents used in `extents`
  std::int32_t reserved = 0;          //!< unused, 0: the padding before `extents`, made explicit
  std::array<std::int64_t, max_rank> extents{};  //!< the tensor's shape, outermost first
  std::uint64_t payload_bytes = 0;               //!< bytes of the payload that follows
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

namespace detail {

//! The header of a tensor of element type `code` with `extents` and `bytes` of payload; `type`
//! names the tensor type in the error for too many extents.
inline WireHeader wire_header(std::uint32_t code, const std::vector<int>& extents,
                              std::uint64_t bytes, const char* type) {
  if (extents.size() > static_cast<std::size_t>(WireHeader::max_rank))
    throw error(std::string(type) + " with " + std::to_string(extents.size()) +
                " extents cannot be sent; at most " + std::to_string(WireHeader::max_rank) +
                " are supported.");
  WireHeader h;
  h.element_type = code;
  h.rank = static_cast<std::int32_t>(extents.size());
  for (std::size_t i = 0; i < extents.size(); ++i)
    h.extents[i] = extents[i];
  h.payload_bytes = bytes;
  return h;
}

//! The extents a received header announces, once it is checked to describe a tensor of
//! element type `code` (`type` names the tensor type in the error).
inline std::vector<int> wire_extents(const WireHeader& h, std::uint32_t code, const char* type) {
  if (h.magic != WireHeader::magic_value || h.element_type != code || h.rank < 0 ||
      h.rank > WireHeader::max_rank)
    throw error(std::string("a received tensor header does not describe a ") + type +
                " (element type code " + std::to_string(h.element_type) + ", expected " +
                std::to_string(code) + "); both ends must use the same tensor type.");
  std::vector<int> extents;
  for (int i = 0; i < h.rank; ++i)
    extents.push_back(static_cast<int>(h.extents[static_cast<std::size_t>(i)]));
  return extents;
}

//! Throws when a tensor made from `h` does not hold the payload it announces.
inline void check_wire_bytes(const WireHeader& h, std::size_t bytes) {
  if (bytes != h.payload_bytes)
    throw error("a received tensor header announces " + std::to_string(h.payload_bytes) +
                " payload bytes for extents that need " + std::to_string(bytes) + ".");
}

}  // namespace detail

//! Checks `Tensor` against `wire_tensor` with a readable error.
template <class Tensor>
constexpr bool check_wire_tensor() {
  static_assert(
      requires { sizeof(wire<Tensor>); },
      "pipesched: this tensor type cannot cross a process boundary: specialize "
      "`pipesched::wire<Tensor>` with describe, payload (const and non-const) and make "
      "(see pipesched/exec/wire.hpp)");
  return wire_tensor<Tensor>;
}

}  // namespace pipesched
