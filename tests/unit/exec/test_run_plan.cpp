// Reading a plan to run (exec/run_plan.hpp): a plan the tuner found, written in the shape of
// `pipesched tune --json`, reads back to the same schedule and grid, alone or inside the whole
// output; a null best, missing and mistyped fields, fields that disagree with the schedule and
// a schedule that does not parse or validate are each refused with a sentence naming them.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/exec/run_plan.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/tune.hpp"

namespace ps = pipesched;

namespace {

// A plan object's fields as JSON text, in the order `pipesched tune --json` writes them.
using Fields = std::vector<std::pair<std::string, std::string>>;

std::string str(const std::string& s) {
  return ps::json::quoted(s);
}

// The fields tools/cmd_tune_report.cpp (plan_json) writes for `p` under UniformCost.
Fields plan_fields(const ps::TunePlan& p) {
  std::string peaks = "[";
  for (double v : p.peak_per_rank)
    peaks += (peaks.size() > 1 ? "," : "") + ps::json::number(v);
  return {{"schedule", str(p.base)},
          {"checkpoint", str(ps::to_string(p.checkpoint))},
          {"wgrad", str(p.fine_wgrad                      ? "fine"
                        : p.wgrad == ps::WGradMode::Split ? "split"
                                                          : "fused")},
          {"pp", std::to_string(p.schedule.problem.ranks)},
          {"dp", std::to_string(p.data)},
          {"tp", std::to_string(p.tensor)},
          {"zero", std::to_string(p.zero)},
          {"sequence_parallel", p.sequence_parallel ? "true" : "false"},
          {"microbatch_size", std::to_string(p.microbatch_size)},
          {"microbatches", std::to_string(p.microbatches)},
          {"chunks", std::to_string(p.chunks)},
          {"slices", std::to_string(p.slices)},
          {"warmup", std::to_string(p.warmup)},
          {"layers_per_stage", "[]"},
          {"step_time_s", "null"},
          {"peak_memory_bytes", "null"},
          {"mfu", "null"},
          {"command", str("pipesched simulate --schedule " + p.base)},
          {"base", str(p.base)},
          {"makespan", ps::json::number(p.makespan)},
          {"recomputes", std::to_string(p.recomputes)},
          {"peak_memory", peaks + "]"},
          {"schedule_text", str(ps::to_text(p.schedule))}};
}

std::string object_of(const Fields& fields, bool spaced = false) {
  ps::json::Writer w(spaced);
  w.begin_object();
  for (const auto& [k, v] : fields)
    w.key(k).raw(v);
  w.end_object();
  return w.take();
}

Fields without(Fields f, const std::string& key) {
  std::erase_if(f, [&](const auto& kv) { return kv.first == key; });
  return f;
}

Fields with(Fields f, const std::string& key, const std::string& value) {
  for (auto& [k, v] : f)
    if (k == key) v = value;
  return f;
}

// The tuner's best plan for p = 4, global batch 8, budget 4 (interleaved 1F1B with Mario's
// recomputes, as the command line's corpus case tune-uniform-json finds).
const ps::TunePlan& tuned() {
  static const ps::TunePlan plan = [] {
    ps::TuneRequest req{.ranks = 4, .global_batch = 8};
    req.budget = ps::MemoryBudget{.all = 4, .per_rank = {}};
    req.threads = 1;
    ps::TuneResult r = ps::tune(req, ps::UniformCost{.f = 1, .b = 2});
    if (!r.best) throw std::runtime_error("the tuner found no plan");
    return *r.best;
  }();
  return plan;
}

std::string refusal(const std::string& text) {
  try {
    ps::read_run_plan(text, "plan.json");
  } catch (const ps::error& e) {
    return e.what();
  }
  ADD_FAILURE() << "reading the plan did not throw: " << text.substr(0, 200);
  return {};
}

}  // namespace

TEST(RunPlan, ReadsBackThePlanTheTunerFound) {
  const ps::TunePlan& best = tuned();
  ASSERT_GT(best.recomputes, 0) << "the case should carry recomputes through the text form";
  const ps::RunPlan p = ps::read_run_plan(object_of(plan_fields(best)), "plan.json");
  EXPECT_EQ(p.schedule, best.schedule);
  EXPECT_EQ(ps::to_text(p.schedule), ps::to_text(best.schedule));
  EXPECT_EQ(p.schedule.name, best.schedule.name);
  EXPECT_EQ(p.grid.pipeline, 4);
  EXPECT_EQ(p.grid.data, 1);
  EXPECT_EQ(p.grid.tensor, 1);
  EXPECT_EQ(p.grid.size(), 4);
  EXPECT_EQ(p.zero, 0);
  EXPECT_FALSE(p.sequence_parallel);
  EXPECT_EQ(p.microbatch_size, 1);
  EXPECT_EQ(p.microbatches, 8);
  EXPECT_EQ(p.chunks, best.chunks);
  EXPECT_EQ(p.slices, 1);
  EXPECT_TRUE(p.layers_per_stage.empty());
  EXPECT_EQ(p.base, best.base);
  EXPECT_EQ(p.checkpoint, ps::to_string(best.checkpoint));
  EXPECT_EQ(p.wgrad, "fused");
  EXPECT_FALSE(p.step_time_s);
  EXPECT_EQ(p.command, "pipesched simulate --schedule " + best.base);
}

TEST(RunPlan, TakesTheBestOfTheWholeTuneOutput) {
  const std::string plan = object_of(plan_fields(tuned()), true);
  const std::string out = "{\"best\": " + plan + ", \"baselines\": [" + plan +
                          ", {\"schedule\": \"1f1b\", \"checkpoint\": \"none\", "
                          "\"step_time_s\": null}], \"search\": {\"candidates\": 3}, "
                          "\"notes\": []}\n";
  const ps::RunPlan p = ps::read_run_plan(out, "tune.json");
  EXPECT_EQ(p.schedule, tuned().schedule);
  EXPECT_EQ(p.grid.size(), 4);
}

TEST(RunPlan, ReadsAClusterPlanWithLayersPerStage) {
  // Chimera holds two replicas of the model: 8 stages on 4 ranks are 4 model stages.
  const ps::Schedule s = ps::find_generator("chimera").generate(
      ps::Problem{.ranks = 4, .microbatches = 4}, ps::WGradMode::Fused);
  ASSERT_EQ(s.problem.replicas, 2);
  const Fields f = {{"schedule", str("chimera")},
                    {"checkpoint", str("none")},
                    {"pp", "4"},
                    {"dp", "2"},
                    {"tp", "2"},
                    {"zero", "1"},
                    {"sequence_parallel", "true"},
                    {"microbatch_size", "2"},
                    {"microbatches", "4"},
                    {"layers_per_stage", "[6, 6, 6, 6]"},
                    {"step_time_s", "1.25"},
                    {"future_field", "{\"ignored\": [1]}"},
                    {"schedule_text", str(ps::to_text(s))}};
  const ps::RunPlan p = ps::read_run_plan(object_of(f), "plan.json");
  EXPECT_EQ(p.schedule, s);
  EXPECT_EQ(p.grid.size(), 16);
  EXPECT_EQ(p.grid.coordinates(5), (ps::ProcessGrid::Coordinates{1, 0, 1}));
  EXPECT_EQ(p.zero, 1);
  EXPECT_TRUE(p.sequence_parallel);
  EXPECT_EQ(p.microbatch_size, 2);
  EXPECT_EQ(p.layers_per_stage, (std::vector<int>{6, 6, 6, 6}));
  ASSERT_TRUE(p.step_time_s);
  EXPECT_EQ(*p.step_time_s, 1.25);
  EXPECT_EQ(p.chunks, 2);    // not given: stages per rank
  EXPECT_EQ(p.wgrad, "");    // not given
  EXPECT_EQ(p.command, "");  // not given
  const std::string eight = object_of(with(f, "layers_per_stage", "[6, 6, 6, 6, 6, 6, 6, 6]"));
  EXPECT_EQ(refusal(eight), "plan.json: line 1, column " + std::to_string(eight.find("[6, 6") + 1) +
                                ": field \"layers_per_stage\" has 8 entries but the schedule in "
                                "\"schedule_text\" has 4 model stages; give one layer count per "
                                "stage.");
}

TEST(RunPlan, RefusesANullBestWithTheReason) {
  EXPECT_EQ(refusal("{\"best\":null,\"search\":{\"candidates\":20,\"total\":20,\"refused\":0,"
                    "\"over_budget\":20},\"notes\":[]}"),
            "plan.json: line 1, column 9: \"best\" is null: the search found no plan that fits (of "
            "20 candidates, 20 were over the memory budget and 0 refused); there is nothing to "
            "run (tune again with a larger --memory-budget, checkpointing or more GPUs).");
  EXPECT_EQ(refusal("{\"best\": null, \"notes\": [{\"configuration\": \"1f1b\", \"reason\": "
                    "\"too few layers\", \"count\": 2}]}"),
            "plan.json: line 1, column 10: \"best\" is null: the search found no plan that fits; "
            "its first note: too few layers; there is nothing to run (tune again with a larger "
            "--memory-budget, checkpointing or more GPUs).");
  EXPECT_EQ(refusal("{\"best\": 3}"),
            "plan.json: line 1, column 10: \"best\" is a number; expected a plan (an object) or "
            "null.");
  EXPECT_EQ(refusal("{\"plans\": []}"),
            "plan.json: line 1, column 1: this object is neither a plan (it has no field "
            "\"schedule_text\") nor the output of `pipesched tune --json` (it has no field "
            "\"best\").");
  EXPECT_EQ(refusal("[{}]"),
            "plan.json: line 1, column 1: the text is an array; expected an "
            "object: a plan or the output of `pipesched tune --json`.");
  EXPECT_EQ(refusal("{\"best\": {}"),
            "plan.json: line 1, column 12: the input ends; expected ',' or '}' in the object.");
}

TEST(RunPlan, NamesAMissingOrMistypedField) {
  const Fields f = plan_fields(tuned());
  for (const char* key : {"schedule", "checkpoint", "pp", "dp", "tp", "zero", "sequence_parallel",
                          "microbatch_size", "microbatches", "layers_per_stage", "schedule_text"})
    EXPECT_EQ(refusal(object_of(without(f, key))),
              std::string("plan.json: line 1, column 1: field \"") + key +
                  "\" is missing; a plan from `pipesched tune --json` has it.");
  // Fields the tuner writes but a run does not need may be left out.
  for (const char* key : {"chunks", "slices", "wgrad", "step_time_s", "command", "makespan"})
    EXPECT_NO_THROW(ps::read_run_plan(object_of(without(f, key)), "plan.json")) << key;

  const auto message_of = [&](const std::string& key, const std::string& value) {
    const std::string m = refusal(object_of(with(f, key, value)));
    return m.substr(m.find(": field") + 2);  // the position depends on the fields before
  };
  EXPECT_EQ(message_of("dp", "\"two\""),
            "field \"dp\" is \"two\" (a string); it is a whole number, 1 or more (the "
            "data-parallel replicas).");
  EXPECT_EQ(message_of("dp", "0"),
            "field \"dp\" is 0; it is a whole number, 1 or more (the data-parallel replicas).");
  EXPECT_EQ(message_of("tp", "1.5"),
            "field \"tp\" is 1.5; it is a whole number, 1 or more (the tensor-parallel degree).");
  EXPECT_EQ(message_of("tp", "3e9"),
            "field \"tp\" is 3e9; it is a whole number, 1 or more (the tensor-parallel degree).");
  EXPECT_EQ(message_of("zero", "3"),
            "field \"zero\" is 3; the ZeRO stage is 0 (none), 1 "
            "(optimizer state) or 2 (+ gradients).");
  EXPECT_EQ(message_of("zero", "-1"),
            "field \"zero\" is -1; it is a whole number, 0 or more (the ZeRO stage: 0, 1 or 2).");
  EXPECT_EQ(message_of("sequence_parallel", "1"),
            "field \"sequence_parallel\" is 1; it is true or false.");
  EXPECT_EQ(message_of("checkpoint", "null"), "field \"checkpoint\" is null; it is a string.");
  EXPECT_EQ(message_of("layers_per_stage", "{}"),
            "field \"layers_per_stage\" is an object; it is an array of layer counts, one per "
            "model stage, each 1 or more (empty for a plan made without a model).");
  EXPECT_EQ(message_of("schedule_text", "[]"),
            "field \"schedule_text\" is an array; it is the schedule in pipesched's text form (a "
            "string).");
  EXPECT_EQ(message_of("step_time_s", "\"1 s\""),
            "field \"step_time_s\" is \"1 s\" (a string); it is a step time in seconds, 0 or "
            "more, or null.");
  EXPECT_EQ(message_of("pp", "2"),
            "field \"pp\" is 2 but the schedule in \"schedule_text\" has 4 ranks; pp is the "
            "schedule's rank count, so they must agree.");
  EXPECT_EQ(message_of("microbatches", "16"),
            "field \"microbatches\" is 16 but the schedule in \"schedule_text\" has 8 "
            "microbatches; they must agree.");
  const std::string bad_layer = refusal(object_of(with(f, "layers_per_stage", "[2, 0]")));
  EXPECT_NE(bad_layer.find("field \"layers_per_stage\" holds 0; it is an array of layer counts"),
            std::string::npos)
      << bad_layer;
  // The position is the value's: the line and column of the mistyped dp.
  const std::string spaced = object_of(with(f, "dp", "\"two\""), true);
  try {
    ps::read_run_plan(spaced, "plan.json");
    ADD_FAILURE() << "a string dp was read";
  } catch (const ps::parse_error& e) {
    EXPECT_EQ(e.line(), 1);
    EXPECT_EQ(e.column(), static_cast<int>(spaced.find("\"two\"")) + 1);
  }
}

TEST(RunPlan, RefusesAScheduleThatDoesNotParseOrValidate) {
  const Fields f = plan_fields(tuned());
  const std::string text = ps::to_text(tuned().schedule);
  // Not the text form: the text reader's message, with the field it came from.
  const std::string unreadable = refusal(object_of(with(f, "schedule_text", str("ranks four\n"))));
  EXPECT_EQ(unreadable.rfind("plan.json, field \"schedule_text\": line 1, column 7: ", 0), 0u)
      << unreadable;
  // An action taken out of rank 0's list: it parses, and the validator refuses it.
  std::string broken = text;
  const std::size_t rank0 = broken.find("rank 0: ");
  const std::size_t first = broken.find(' ', rank0 + 8);
  broken.erase(rank0 + 8, first - rank0 - 7);
  try {
    ps::read_run_plan(object_of(with(f, "schedule_text", str(broken))), "plan.json");
    ADD_FAILURE() << "a schedule with an action missing was read";
  } catch (const ps::invalid_schedule& e) {
    EXPECT_EQ(std::string(e.what()).rfind("plan.json, field \"schedule_text\": the schedule does "
                                          "not validate: ",
                                          0),
              0u)
        << e.what();
  }
}

TEST(RunPlan, ReadsAPlanFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("pipesched_run_plan_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "plan.json").string();
  std::ofstream(path) << object_of(plan_fields(tuned()), true) << "\n";
  EXPECT_EQ(ps::read_run_plan_file(path).schedule, tuned().schedule);
  std::ofstream(path) << "{\"best\": null}";
  try {
    ps::read_run_plan_file(path);
    ADD_FAILURE() << "a null best was read";
  } catch (const ps::parse_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": line 1, column 10: \"best\" is null", 0), 0u)
        << e.what();
  }
  const std::string missing = (dir / "nothing.json").string();
  try {
    ps::read_run_plan_file(missing);
    ADD_FAILURE() << "a missing file was read";
  } catch (const ps::error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot read plan file \"" + missing + "\": No such file or directory.");
  }
  try {
    ps::read_run_plan_file(dir.string());
    ADD_FAILURE() << "a directory was read";
  } catch (const ps::error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read plan file \"" + dir.string() +
                                         "\": it is a directory; give the path of a plan from "
                                         "`pipesched tune --json`.");
  }
  std::filesystem::remove_all(dir);
}

// The example of docs/executor.md, "Running a plan".
TEST(RunPlan, DocumentedUse) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("pipesched_run_plan_doc_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "plan.json").string();
  std::ofstream(path) << "{\"best\": " << object_of(plan_fields(tuned())) << "}\n";
  const int process = 2;  // this process's rank in MPI_COMM_WORLD
  // [run-plan]
  // pipesched tune ... --json > plan.json;  mpirun -np <pp·dp·tp> trainer plan.json
  const pipesched::RunPlan plan = pipesched::read_run_plan_file(path);
  // This process's place in the job of plan.grid.size() processes ...
  const pipesched::ProcessGrid::Coordinates me = plan.grid.coordinates(process);
  // ... and its pipeline rank's list: the stages it holds get plan.layers_per_stage layers,
  // each microbatch plan.microbatch_size sequences. Over MPI:
  //   pipesched::MpiGroups groups(plan.grid);
  //   pipesched::MpiPipeline<Stage> pipe(plan.schedule, stages, groups, options);
  const std::vector<pipesched::Action>& actions = plan.schedule.ranks[me.pipeline];
  // [run-plan]
  EXPECT_EQ(me.pipeline, 2);
  EXPECT_EQ(actions, tuned().schedule.ranks[2]);
  std::filesystem::remove_all(dir);
}

namespace {

// What follows ": field" in the refusal of `fields` (the position depends on the fields before).
std::string field_refusal(const Fields& fields) {
  const std::string m = refusal(object_of(fields));
  const std::size_t at = m.find(": field");
  return at == std::string::npos ? m : m.substr(at + 2);
}

}  // namespace

// Every numeric field has a range: a microbatch of 2^27 sequences (which took every process's
// memory) and a grid beyond the GPUs `tune` plans for are refused with the field, the value
// and the range.
TEST(RunPlan, BoundsEveryNumericField) {
  const Fields f = plan_fields(tuned());
  EXPECT_EQ(field_refusal(with(f, "microbatch_size", "134217728")),
            "field \"microbatch_size\" is 134217728; it is a whole number from 1 to 65536 "
            "(sequences per microbatch).");
  EXPECT_EQ(field_refusal(with(f, "microbatch_size", "100000")),
            "field \"microbatch_size\" is 100000; it is a whole number from 1 to 65536 "
            "(sequences per microbatch).");
  EXPECT_NO_THROW(ps::read_run_plan(object_of(with(f, "microbatch_size", "65536"))));
  EXPECT_EQ(refusal(object_of(with(with(f, "dp", "16384"), "tp", "2"))),
            "plan.json: line 1, column 1: pp 4 × dp 16384 × tp 2 is 131072 processes; a plan "
            "runs on at most 65536 (the GPUs `pipesched tune --gpus` plans for).");
  EXPECT_NO_THROW(ps::read_run_plan(object_of(with(with(f, "dp", "8192"), "tp", "2"))));
  const std::string layers = field_refusal(with(f, "layers_per_stage", "[4, 4, 4, 2097152]"));
  EXPECT_NE(layers.find("field \"layers_per_stage\" holds 2097152; it is an array of layer "
                        "counts"),
            std::string::npos)
      << layers;
  EXPECT_NE(layers.find("at most 1048576."), std::string::npos) << layers;
}

// The fields that describe the schedule agree with it and with each other.
TEST(RunPlan, ChecksTheFieldsAgainstEachOtherAndTheSchedule) {
  const ps::TunePlan& best = tuned();  // interleaved-1f1b x4 with Mario's recomputes, fused
  ASSERT_EQ(best.base, "interleaved-1f1b");
  ASSERT_EQ(best.chunks, 4);
  const Fields f = plan_fields(best);
  EXPECT_EQ(field_refusal(with(f, "sequence_parallel", "true")),
            "field \"sequence_parallel\" is true but \"tp\" is 1; sequence parallelism splits "
            "the sequence over a tensor group, so a plan without tensor parallelism has false.");
  EXPECT_NO_THROW(
      ps::read_run_plan(object_of(with(with(f, "sequence_parallel", "true"), "tp", "2"))));
  EXPECT_EQ(field_refusal(with(f, "chunks", "2")),
            "field \"chunks\" is 2 but the schedule in \"schedule_text\" has 4 stages per "
            "rank; they must agree.");
  EXPECT_EQ(field_refusal(with(f, "checkpoint", str("sometimes"))),
            "field \"checkpoint\" is \"sometimes\" (a string); it is the checkpoint mode: none, "
            "full, selective, mario, full-early or selective-early.");
  const std::string none = field_refusal(with(f, "checkpoint", str("none")));
  EXPECT_EQ(none.rfind("field \"checkpoint\" is \"none\" but the schedule in \"schedule_text\" "
                       "recomputes (",
                       0),
            0u)
      << none;
  EXPECT_EQ(field_refusal(with(f, "wgrad", str("split"))),
            "field \"wgrad\" is \"split\" but the schedule in \"schedule_text\" has no input or "
            "weight gradient actions (I, W); give the mode the plan was made with.");
  EXPECT_EQ(field_refusal(with(f, "wgrad", str("halves"))),
            "field \"wgrad\" is \"halves\" (a string); it is how the backward is split: "
            "\"fused\", \"split\" or \"fine\".");
  const std::string base = refusal(object_of(with(f, "schedule", str("zb-h1"))));
  EXPECT_NE(base.find(": field \"schedule\" is \"zb-h1\" but the schedule in \"schedule_text\" "
                      "is named \"" +
                      best.schedule.name +
                      "\"; the tuner names a plan's schedule after its base (\"zb-h1\" or "
                      "\"zb-h1+...\")."),
            std::string::npos)
      << base;
  // A split schedule said to be fused, and one cut into parts said to be split.
  const ps::Schedule zb = ps::find_generator("zb-h1").generate(
      ps::Problem{.ranks = 4, .microbatches = 8}, ps::WGradMode::Split);
  Fields z = with(with(with(f, "schedule", str("zb-h1")), "schedule_text", str(ps::to_text(zb))),
                  "checkpoint", str("none"));
  z = with(with(z, "chunks", "1"), "wgrad", str("split"));
  EXPECT_NO_THROW(ps::read_run_plan(object_of(z)));
  const std::string fused = field_refusal(with(z, "wgrad", str("fused")));
  EXPECT_EQ(fused.rfind("field \"wgrad\" is \"fused\" but the schedule in \"schedule_text\" "
                        "splits its backward (",
                        0),
            0u)
      << fused;
}

// Every plan of a search over every base, checkpoint mode and backward mode reads back: the
// checks above refuse none of what the tuner writes.
TEST(RunPlan, ReadsEveryPlanOfASearchOverEveryBase) {
  ps::TuneRequest req{.ranks = 4, .global_batch = 8};
  req.bases.clear();
  for (const ps::GeneratorInfo& g : ps::generators())
    req.bases.push_back(std::string(g.name));
  req.checkpoints.assign(std::begin(ps::checkpoint_modes), std::end(ps::checkpoint_modes));
  req.slices = {1, 2};
  req.fine_wgrad = true;
  req.budget = ps::MemoryBudget{.all = 3, .per_rank = {}};
  req.threads = 1;
  const ps::TuneResult r = ps::tune(req, ps::UniformCost{.f = 1, .b = 2});
  int read = 0;
  std::set<std::string> bases;
  for (const ps::TuneBaseline& b : r.baselines) {
    if (!b.plan) continue;
    SCOPED_TRACE(b.plan->schedule.name);
    const ps::RunPlan p = ps::read_run_plan(object_of(plan_fields(*b.plan)), "plan.json");
    EXPECT_EQ(p.schedule, b.plan->schedule);
    bases.insert(p.base);
    ++read;
  }
  EXPECT_GE(read, 40);
  EXPECT_EQ(bases.size(), ps::generators().size());
}

// The schedule's actions are counted before it is parsed, and the JSON's values before the
// text is: a plan over the command's action limit, or a file of numbers, is refused without
// building either.
TEST(RunPlan, RefusesTooManyActionsOrValuesBeforeBuildingThem) {
  const Fields f = plan_fields(tuned());
  std::string text = "ranks 1 stages 1 microbatches 1\nplacement linear\nrank 0:";
  text.reserve(text.size() + 4 * 2'000'001);
  for (int i = 0; i < 2'000'001; ++i)
    text += " 0F0";
  const std::string actions =
      field_refusal(with(with(f, "pp", "1"), "schedule_text", str(text + "\n")));
  EXPECT_EQ(actions,
            "field \"schedule_text\" holds 2000001 actions; a plan runs at most 2000000 "
            "(the limit of every schedule the pipesched command builds or reads).");
  std::string numbers = "{\"best\": [1";
  for (int i = 0; i < 100'000; ++i)
    numbers += ",1";
  numbers += "]}";
  EXPECT_EQ(refusal(numbers),
            "plan.json: the text holds more than 65536 JSON values for its " +
                std::to_string(numbers.size()) +
                " bytes; a plan of `pipesched tune --json` holds a few dozen values per plan and "
                "at most one per 8 bytes (the larger of 65536 and its size / 8), so this is not "
                "one.");
}
