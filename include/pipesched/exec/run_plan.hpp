// The earlier names of reading a plan to run: the plan file is io/plan_file.hpp now, and a plan
// read is a tuning::Plan (tuning::Plan::grid() places the processes), the type `tune` returns.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "pipesched/io/plan_file.hpp"

namespace pipesched {

//! A plan read to be run: the plan `tune` returns (io/plan_file.hpp).
using RunPlan [[deprecated("a plan read is a tuning::Plan (io/plan_file.hpp)")]] = tuning::Plan;

//! read_plan under its earlier name.
[[deprecated("use read_plan (io/plan_file.hpp)")]] inline tuning::Plan read_run_plan(
    std::string_view json_text, std::string source = "plan") {
  return read_plan(json_text, std::move(source));
}

//! read_plan_file under its earlier name.
[[deprecated("use read_plan_file (io/plan_file.hpp)")]] inline tuning::Plan read_run_plan_file(
    const std::string& path) {
  return read_plan_file(path);
}

}  // namespace pipesched
