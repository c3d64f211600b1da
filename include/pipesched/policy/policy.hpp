// All policy families and plan<...>.
#pragma once

#include "pipesched/policy/checkpoint.hpp"
#include "pipesched/policy/family.hpp"
#include "pipesched/policy/generate.hpp"
#include "pipesched/policy/order.hpp"
#include "pipesched/policy/placement.hpp"
#include "pipesched/policy/plan.hpp"
#include "pipesched/policy/slicing.hpp"
#include "pipesched/policy/wgrad.hpp"

//! \namespace pipesched::checkpoint
//! Checkpoint policies: which forwards drop their activations and recompute them before their
//! backward (none, full, selective, Mario, or a policy of the program's own).
