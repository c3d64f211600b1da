// How a pipeline's step commits: every rank's list runs first; only when every rank finished
// does any rank apply its update (the snapshot hook, then the optimizer hook), and when an
// update fails anywhere the updates are undone on every rank whose optimizer ran (the rollback
// hook; a rank whose snapshot threw changed nothing). What the error then says.
#pragma once

#include <string>

#include "pipesched/exec/errors.hpp"

namespace pipesched::detail {

//! The error of a step whose optimizer failed (`e`, on its rank) once every rank's update has
//! been undone (`undone`), or not: then the message says which updates stay and why (`why`:
//! no rollback hook, or what the rollback threw).
inline execution_error update_failed(const execution_error& e, bool undone,
                                     const std::string& why) {
  if (undone) return rolled_back(e);
  return execution_error(std::string(e.what()) +
                             "; the step was NOT rolled back: the ranks whose optimizer ran keep "
                             "their update (" +
                             why + "), so the ranks' parameters no longer belong to one step",
                         e.rank(), e.position(), e.action(), false);
}

//! Why an update could not be undone when no rollback hook is set.
inline constexpr const char* no_rollback_hook = "no ExecutorOptions::rollback is set to undo it";

}  // namespace pipesched::detail
