// What the executor takes and gives per rank: its knobs (ExecutorOptions) and what one rank
// measured in one step (RankRun).
#pragma once

#include <chrono>
#include <functional>
#include <limits>
#include <vector>

#include "pipesched/analysis/simulate.hpp"

namespace pipesched {

//! A stage's data-parallel gradient reduction, run by the schedule's actions on the rank that
//! holds the stage: `start(stage)` at its REDUCE_GRAD (start reducing the stage's weight
//! gradients over its data-parallel group; return without waiting), `wait(stage)` at its
//! WAIT_REDUCE_GRAD (return once they are reduced). What either throws fails the step at that
//! action. `mpi::GradientReducer` is one over MPI.
struct GradientReduction {
  std::function<void(int stage)> start{};  //!< at REDUCE_GRAD
  std::function<void(int stage)> wait{};   //!< at WAIT_REDUCE_GRAD
  //! True when a reduction is set.
  explicit operator bool() const noexcept { return static_cast<bool>(start); }
};

//! Knobs of the executor.
struct ExecutorOptions {
  //! How long a receive waits before the step fails with the rank and action named. Must be
  //! at least 1 ms (0.001 s; less, negative and NaN are refused when the executor or pipeline
  //! is built, with the value named); infinity, or any duration too long for the steady clock
  //! (std::chrono::hours::max()), waits without a deadline. Process pipelines bound their
  //! start-of-step and end-of-step agreement by it too, and the roll call that names a silent
  //! process.
  std::chrono::duration<double> receive_timeout{60.0};
  //! Called by each rank once per step (e.g. an optimizer step on that rank's stage models),
  //! in a pipeline only once every rank has finished its list: a step that fails anywhere
  //! before that applies no update on any rank. What it throws fails the step like a layer's
  //! exception: the execution_error names the rank and "its optimizer step", at the position
  //! after the list, and every rank's update is then undone by `rollback`.
  std::function<void(int rank)> optimizer{};
  //! Called on rank `rank` right before its `optimizer` call: keeps what `rollback` needs to
  //! put back (its parameters and optimizer state). Optional. What it throws fails the step
  //! like the optimizer's; that rank's optimizer and rollback are then not called (its
  //! parameters never changed), the other ranks' updates are rolled back.
  std::function<void(int rank)> snapshot{};
  //! Undoes rank `rank`'s `optimizer` call of this step (the call may have stopped half-way):
  //! puts back what the rank had before it, as `snapshot` kept it. A pipeline calls it on
  //! every rank whose optimizer ran (not on one whose snapshot threw), when the snapshot or
  //! optimizer failed on any rank, so that the step commits on every rank or on none (the
  //! error's `rolled_back()`). Without it, a failed update leaves the updates of the ranks
  //! whose optimizer ran applied, and the error says so.
  //! `toy::use_sgd` sets all three hooks for the toy models.
  std::function<void(int rank)> rollback{};
  //! Data-parallel gradient reduction (empty: none; the schedule's REDUCE_GRAD and
  //! WAIT_REDUCE_GRAD actions do nothing). When set and the schedule has no REDUCE_GRAD, the
  //! executor places them (`add_gradient_reduction`): each stage's reduction starts right after
  //! its last weight gradient, overlapping the rest of the list, and is waited for before the
  //! optimizer.
  GradientReduction reduce_gradients{};
  //! Dynamic bubble filling: when the rank's next action is a receive whose message has not
  //! arrived, run pending work from later in the rank's own list instead of waiting — the
  //! next recompute R whose forward has already run or, when no recompute can run, the next
  //! weight-gradient W (or W part) whose I has run — then try the receive again; block only
  //! when nothing is pending. Numerics do not change beyond rounding (a recompute's output is
  //! discarded; weight gradients may add up in another order), but held bytes rise earlier
  //! than the list says when a recompute moves up, so the measured peak may then exceed the
  //! static simulation's; `memory_budget_bytes` bounds it. A W run early only frees bytes.
  bool fill_waits = false;
  //! With `fill_waits`: work is run early only if the rank's held bytes stay within this
  //! budget from then until the work's own place in the list, projected from the byte figures
  //! this rank has measured for each of its stages (a stage whose figures it has not seen yet
  //! is not filled across). The budget never holds back the list itself: a schedule whose own
  //! peak is above it still runs, unfilled.
  double memory_budget_bytes = std::numeric_limits<double>::infinity();
};

//! What one rank measured in one step. Times are seconds since the step's common start.
struct RankRun {
  int rank = 0;                      //!< the rank these figures are of
  double loss = 0;                   //!< loss contributions computed on this rank
  double peak_bytes = 0;             //!< largest sum of live stash bytes
  //! Largest sum of the stash bytes offloaded to host memory (OFFLOAD to RELOAD), apart from
  //! peak_bytes.
  double peak_host_bytes = 0;
  double end = 0;                    //!< when the rank's last action ended
  std::vector<ActionTiming> timing;  //!< per position of the executed (lowered) list
  std::vector<MemoryPoint> memory;   //!< held stash bytes after each change
  //! Actions run ahead of their place in the list to fill a wait (`fill_waits`); each keeps
  //! its own list position in `timing`, with the times it really ran.
  int filled = 0;
};

}  // namespace pipesched
