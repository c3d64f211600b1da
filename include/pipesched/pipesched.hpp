// pipesched: pipeline-parallel training schedules as composable C++20 policies.
// The umbrella header: everything that builds with a plain C++ compiler. CUDA, NCCL and MPI
// parts live in their own headers and are never included from here.
#pragma once

#include "pipesched/version.hpp"

#include "pipesched/core/action.hpp"
#include "pipesched/core/error.hpp"
#include "pipesched/core/memory_budget.hpp"
#include "pipesched/core/modes.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/core/problem.hpp"
#include "pipesched/core/schedule.hpp"

#include "pipesched/policy/policy.hpp"

#include "pipesched/policy/registry.hpp"
#include "pipesched/schedule/list_schedule.hpp"

#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/pass/checkpoint.hpp"
#include "pipesched/pass/fill_weight_gradients.hpp"
#include "pipesched/pass/lower_communication.hpp"
#include "pipesched/pass/mario.hpp"
#include "pipesched/pass/offload.hpp"
#include "pipesched/pass/vocabulary.hpp"

#include "pipesched/analysis/cost_model.hpp"
#include "pipesched/analysis/layer_profile.hpp"
#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/profiled_cost.hpp"
#include "pipesched/analysis/shared_compute.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/analysis/transformer_cost.hpp"
#include "pipesched/analysis/uniform_cost.hpp"
#include "pipesched/analysis/validate.hpp"

#include "pipesched/tune/layout_search.hpp"
#include "pipesched/tune/tune.hpp"

#include "pipesched/io/action_string.hpp"
#include "pipesched/io/csv.hpp"
#include "pipesched/io/device_file.hpp"
#include "pipesched/io/json_read.hpp"
#include "pipesched/io/layer_profile_file.hpp"
#include "pipesched/io/layout.hpp"
#include "pipesched/io/model_file.hpp"
#include "pipesched/io/svg.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/io/text_grid.hpp"
#include "pipesched/io/trace.hpp"

#include "pipesched/device/host/host_device.hpp"
#include "pipesched/exec/concepts.hpp"
#include "pipesched/exec/executor.hpp"
#include "pipesched/exec/fingerprint.hpp"
#include "pipesched/exec/layer_profiler.hpp"
#include "pipesched/exec/profile.hpp"
#include "pipesched/exec/replay.hpp"
#include "pipesched/exec/stage_variant.hpp"
#include "pipesched/exec/step_result.hpp"
#include "pipesched/io/plan_file.hpp"
#include "pipesched/transport/inproc/inproc_pipeline.hpp"
#include "pipesched/transport/inproc/inproc_transport.hpp"
