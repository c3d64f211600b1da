// How an NCCL transport starts: every process's GPU, agreed on, and the NCCL links of a rank,
// joined in the one order every rank takes them.
#pragma once

#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/device/cuda/check.cuh"
#include "pipesched/device/cuda/cuda_device.cuh"
#include "pipesched/device/cuda/device_tensor.cuh"
#include "pipesched/transport/mpi/detail/mpi_support.hpp"
#include "pipesched/transport/nccl/detail/link.cuh"
#include "pipesched/transport/nccl/nccl_check.cuh"

namespace pipesched::detail::nccl {

// The device `make` returns, once every process has made its own: a process whose GPU
// cannot be used makes every process throw here, rather than leave them waiting for it; a
// process that does not take part within `timeout` makes the others throw peer_lost.
template <class MakeDevice>
CudaDevice agreed_device(MakeDevice& make, MPI_Comm comm, std::chrono::microseconds interval,
                         std::chrono::duration<double> timeout) {
  std::optional<CudaDevice> device;
  std::exception_ptr failure;
  try {
    device.emplace(make());
  } catch (...) {
    failure = std::current_exception();
  }
  int ok = device.has_value() ? 1 : 0, all = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  mpi::check(MPI_Iallreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm, &request), "MPI_Iallreduce");
  const Wait wait{"the start-up agreement on every process's GPU", deadline_after(timeout),
                  interval};
  if (!poll_until(wait, [&] { return mpi::test(request); }))
    throw peer_lost("nccl::Transport: not every process of the job joined " +
                    std::string(wait.what) + " within " + seconds_text(timeout.count()) +
                    " s, so a process has died, hangs or is still setting up its GPU. End the "
                    "job (mpi::Session::abort).");
  if (failure) std::rethrow_exception(failure);
  if (!all)
    throw cuda_error(
        "nccl::Transport: another process could not set up its GPU (its own error says why), "
        "so no rank can start.");
  return std::move(*device);
}

// An NCCL unique id under a name of its own: nvcc 13's front end fails on a std::vector of the
// unnamed struct that ncclUniqueId is.
struct UniqueId {
  ncclUniqueId id;
};

// One NCCL link of a rank and the (sender, receiver) pair it joins.
struct JoinedLink {
  std::pair<int, int> ends;
  Link link;
};

// Makes the NCCL communicators of rank `rank`, one per link of `links` it is on, with a first
// byte over each (collective over `comm`, whose processes all pass the same `links`); returns
// them with their (sender, receiver) pairs, in the order of `links`.
inline std::vector<JoinedLink> join_links(const std::vector<std::pair<int, int>>& links, int rank,
                                          CudaDevice& device, MPI_Comm comm) {
  std::vector<JoinedLink> joined;
  // Every process must derive the same links; otherwise the joins below would never pair up.
  unsigned long long mine[2] = {links.size(), 0};
  for (const auto& [a, b] : links)
    mine[1] = mine[1] * 1000003u + static_cast<unsigned long long>(a) * 1009u +
              static_cast<unsigned long long>(b);
  unsigned long long low[2] = {0, 0}, high[2] = {0, 0};
  mpi::check(MPI_Allreduce(mine, low, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm), "MPI_Allreduce");
  mpi::check(MPI_Allreduce(mine, high, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm), "MPI_Allreduce");
  if (low[0] != high[0] || low[1] != high[1])
    throw invalid_problem(
        "nccl::Transport: the processes were given schedules with different placements; every "
        "process must construct its transport with the same schedule.");
  if (links.empty()) return joined;
  std::vector<UniqueId> ids(links.size());
  if (rank == 0)
    for (UniqueId& id : ids)
      PIPESCHED_NCCL_CHECK(ncclGetUniqueId(&id.id));
  mpi::check(
      MPI_Bcast(ids.data(), static_cast<int>(ids.size() * sizeof(UniqueId)), MPI_BYTE, 0, comm),
      "MPI_Bcast");
  // A join waits for the other rank of its link, and so does the first message over it
  // (NCCL connects a peer on the host, with both ranks in the call, at the first send or
  // receive); taking links in the one global order means the first unfinished link always
  // has both its ranks at it. One byte over each link now keeps that host-side wait out of
  // the steps, where a sender blocked in it could not post the receives its peer waits on.
  for (std::size_t i = 0; i < links.size(); ++i) {
    const auto [from, to] = links[i];
    if (from != rank && to != rank) continue;
    const bool sends = from == rank;
    Link link;
    check(ncclCommInitRank(link.out(), 2, ids[i].id, sends ? 0 : 1), "ncclCommInitRank", __FILE__,
          __LINE__,
          "each rank needs a GPU of its own (give each process the CudaDevice "
          "of its rank on the node) and NCCL must reach the other process");
    const cudaStream_t stream = sends ? device.send_stream(to) : device.recv_stream(from);
    auto probe = DeviceTensor<unsigned char>::zeros({1}, stream);
    if (sends)
      PIPESCHED_NCCL_CHECK(ncclSend(probe.data(), 1, ncclUint8, 1, link.get(), stream));
    else
      PIPESCHED_NCCL_CHECK(ncclRecv(probe.data(), 1, ncclUint8, 0, link.get(), stream));
    PIPESCHED_CUDA_CHECK(cudaStreamSynchronize(stream));
    joined.push_back(JoinedLink{links[i], std::move(link)});
  }
  return joined;
}

}  // namespace pipesched::detail::nccl
