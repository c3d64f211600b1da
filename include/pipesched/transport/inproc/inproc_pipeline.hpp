// A whole pipeline in one process: one thread per rank, the in-process transport between
// them, one Executor each. The embedded default for examples and tests.
#pragma once

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "pipesched/analysis/simulate.hpp"
#include "pipesched/device/host/host_device.hpp"
#include "pipesched/exec/detail/thread_pipeline.hpp"
#include "pipesched/exec/executor.hpp"
#include "pipesched/exec/step_result.hpp"
#include "pipesched/transport/inproc/inproc_transport.hpp"

namespace pipesched {

namespace detail {

// Host ranks: every rank's device is the host, the step starts now.
struct HostRanks {
  template <class Transport>
  static HostDevice device(Transport&, int) {
    return {};
  }
  template <class Transport>
  static HostDevice::mark_type start(Transport&) {
    return HostDevice{}.mark();
  }
  template <class Transport>
  static void enter(Transport&, int) {}
};

}  // namespace detail

namespace inproc {

//! Runs a schedule on `stages` (one stage model per pipeline stage, indexed by stage; the
//! pipeline keeps pointers, they must outlive it) with one thread per rank. A failure on
//! any rank — a layer that throws, a receive that times out — stops every rank and is
//! rethrown by `step` as the execution_error of the rank that failed first; no thread is
//! left running.
template <class Stage>
class Pipeline : public detail::ThreadPipeline<Stage, Transport<typename Stage::tensor_type>,
                                               HostDevice, detail::HostRanks> {
 public:
  //! A pipeline running `schedule` on `stages`, one thread per rank, under `options`.
  Pipeline(const Schedule& schedule, std::span<Stage> stages, ExecutorOptions options = {})
      : Pipeline::ThreadPipeline("inproc::Pipeline", schedule, stages, options,
                                 schedule.rank_count() > 0 ? schedule.rank_count() : 1) {}
};
}  // namespace inproc

}  // namespace pipesched
