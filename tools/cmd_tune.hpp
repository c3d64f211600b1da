// The parts of `pipesched tune`, in the order it runs them: cmd_tune_options.cpp reads the
// command line into a TuneCommand (options, checks, the grid's limits), cmd_tune.cpp runs the
// search with its progress line, cmd_tune_report.cpp prints what it found as text or JSON.
// Only cmd_tune.cpp includes the tuner's engine (pipesched/tune/tune.hpp).
#pragma once

#include <string>
#include <vector>

#include "cli.hpp"
#include "pipesched/tune/request.hpp"
#include "pipesched/tune/result.hpp"

namespace pipesched::cli {

//! What a plan's `simulate` command needs besides the plan: how tune was asked.
struct CommandContext {
  bool transformer = false;
  std::string model, device, sequence, gpus_per_node;  //!< option values as given ("" = none)
  std::string cluster;                                 //!< --cluster FILE ("" = none)
  std::string profile;                                 //!< --profile FILE ("" = none)
  std::string cost;                                    //!< --cost text (UniformCost)
  std::string budget;                                  //!< --memory-budget text ("" = none)
  std::string slicing;                                 //!< --slicing text ("" = uniform)
  int wgrad_parts = 4;
  bool whole_step = false;
};

//! A tune command line, read and checked: what to search, under which cost model, and how to
//! print it.
struct TuneCommand {
  bool cluster = false;         //!< --gpus N: a cluster search (creq), else one pipeline (req)
  tuning::Request req;          //!< the search (with --gpus, inside each pipeline)
  tuning::ClusterRequest creq;  //!< with --gpus: the cluster, its search a copy of req
  AnyCost cost;                 //!< with --gpus its tensor, data and ZeRO degrees are the search's
  bool transformer = false;
  Units units;
  CommandContext context;  //!< for each plan's `simulate` command
  bool json = false;       //!< --json
  bool progress = false;   //!< --progress (the line is also shown on a terminal)
  std::string report;      //!< --report FILE.html ("" = none)
};

//! The options tune accepts: its own, then the cost model's (with --tp as a list).
std::vector<OptionSpec> tune_option_specs();
//! `tune --help`.
std::string tune_help(const std::vector<OptionSpec>& specs);
//! Reads `argv` against `specs`: usage_error for bad usage, a request out of range or a search
//! grid too large to search.
TuneCommand read_tune_command(const std::vector<std::string>& argv,
                              const std::vector<OptionSpec>& specs);

//! usage_error when a plan of `r` has a step time, bubble, memory or MFU that is not a finite
//! figure (the cost model's figures overflowed), so that no inf or nan is printed as a result.
void require_finite(const tuning::Result& r);

//! A `pipesched simulate` command line that reproduces plan `p`'s step time.
std::string plan_command(const tuning::Plan& p, const CommandContext& c);
//! The result as an HTML page (cmd_tune_html.cpp) in c.report; `argv` is tune's command line.
void write_tune_html(const tuning::Result& r, const TuneCommand& c,
                     const std::vector<std::string>& argv);

//! The result as one JSON object on standard output (the contract of docs/cli.md).
void print_tune_json(const tuning::Result& r, const TuneCommand& c);
//! The result as text on standard output: the bests, each pair's best, the search, the notes.
void print_tune_text(const tuning::Result& r, const TuneCommand& c);

}  // namespace pipesched::cli
