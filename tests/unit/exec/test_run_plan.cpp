// The plan file (io/plan_file.hpp): a plan the tuner found, written in the shape of `pipesched
// tune --json`, reads back to the same schedule and grid, alone or inside the whole output; a
// null best, missing and mistyped fields, fields that disagree with the schedule and a schedule
// that does not parse or validate are each refused with a sentence naming them. write_plan and
// read_plan give back the same plan, cost model included, which simulates to its step time
// again (cost_of); a cost model that disagrees with its plan is refused.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "pipesched/analysis/presets.hpp"
#include "pipesched/analysis/simulate.hpp"
#include "pipesched/io/json.hpp"
#include "pipesched/io/plan_file.hpp"
#include "pipesched/io/text.hpp"
#include "pipesched/pass/apply_checkpoint.hpp"
#include "pipesched/policy/registry.hpp"
#include "pipesched/tune/tune.hpp"

namespace test_run_plan {

namespace ps = pipesched;

namespace {

// A plan object's fields as JSON text, in the order `pipesched tune --json` writes them.
using Fields = std::vector<std::pair<std::string, std::string>>;

std::string str(const std::string& s) {
  return ps::json::quoted(s);
}

// The fields write_plan writes for `p` under UniformCost (without its cost model).
Fields plan_fields(const ps::tuning::Plan& p) {
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
const ps::tuning::Plan& tuned() {
  static const ps::tuning::Plan plan = [] {
    ps::tuning::Request req{.ranks = 4, .global_batch = 8};
    req.budget = ps::MemoryBudget{.all = 4, .per_rank = {}};
    req.threads = 1;
    ps::tuning::Result r = ps::tune(req, ps::UniformCost{.f = 1, .b = 2});
    if (!r.best) throw std::runtime_error("the tuner found no plan");
    return *r.best;
  }();
  return plan;
}

std::string refusal(const std::string& text) {
  try {
    ps::read_plan(text, "plan.json");
  } catch (const ps::error& e) {
    return e.what();
  }
  ADD_FAILURE() << "reading the plan did not throw: " << text.substr(0, 200);
  return {};
}

}  // namespace

TEST(PlanFile, ReadsBackThePlanTheTunerFound) {
  const ps::tuning::Plan& best = tuned();
  ASSERT_GT(best.recomputes, 0) << "the case should carry recomputes through the text form";
  const ps::tuning::Plan p = ps::read_plan(object_of(plan_fields(best)), "plan.json");
  EXPECT_EQ(p.schedule, best.schedule);
  EXPECT_EQ(ps::to_text(p.schedule), ps::to_text(best.schedule));
  EXPECT_EQ(p.schedule.name, best.schedule.name);
  EXPECT_EQ(p.grid().pipeline, 4);
  EXPECT_EQ(p.grid().data, 1);
  EXPECT_EQ(p.grid().tensor, 1);
  EXPECT_EQ(p.grid().size(), 4);
  EXPECT_EQ(p.zero, 0);
  EXPECT_FALSE(p.sequence_parallel);
  EXPECT_EQ(p.microbatch_size, 1);
  EXPECT_EQ(p.microbatches, 8);
  EXPECT_EQ(p.chunks, best.chunks);
  EXPECT_EQ(p.slices, 1);
  EXPECT_TRUE(p.layers_per_stage.empty());
  EXPECT_EQ(p.base, best.base);
  EXPECT_EQ(p.checkpoint, best.checkpoint);
  EXPECT_EQ(p.wgrad, ps::WGradMode::Fused);
  EXPECT_FALSE(p.fine_wgrad);
  EXPECT_EQ(p.memory_unit, ps::MemoryUnit::Units);  // step_time_s is null
  EXPECT_EQ(p.makespan, best.makespan);
  EXPECT_EQ(p.peak_per_rank, best.peak_per_rank);
  EXPECT_EQ(p.recomputes, best.recomputes);
  EXPECT_EQ(p.global_batch, 8);
  EXPECT_EQ(p.gpus, 4);
  EXPECT_FALSE(p.cost.has_value());  // the fields above give no "cost_model"
}

TEST(PlanFile, TakesTheBestOfTheWholeTuneOutput) {
  const std::string plan = object_of(plan_fields(tuned()), true);
  const std::string out = "{\"best\": " + plan + ", \"baselines\": [" + plan +
                          ", {\"schedule\": \"1f1b\", \"checkpoint\": \"none\", "
                          "\"step_time_s\": null}], \"search\": {\"candidates\": 3}, "
                          "\"notes\": []}\n";
  const ps::tuning::Plan p = ps::read_plan(out, "tune.json");
  EXPECT_EQ(p.schedule, tuned().schedule);
  EXPECT_EQ(p.grid().size(), 4);
}

TEST(PlanFile, ReadsAClusterPlanWithLayersPerStage) {
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
  const ps::tuning::Plan p = ps::read_plan(object_of(f), "plan.json");
  EXPECT_EQ(p.schedule, s);
  EXPECT_EQ(p.grid().size(), 16);
  EXPECT_EQ(p.grid().coordinates(5), (ps::ProcessGrid::Coordinates{1, 0, 1}));
  EXPECT_EQ(p.zero, 1);
  EXPECT_TRUE(p.sequence_parallel);
  EXPECT_EQ(p.microbatch_size, 2);
  EXPECT_EQ(p.layers_per_stage, (std::vector<int>{6, 6, 6, 6}));
  EXPECT_EQ(p.makespan, 1.25);  // step_time_s
  EXPECT_EQ(p.memory_unit, ps::MemoryUnit::Bytes);
  EXPECT_EQ(p.chunks, 2);                    // not given: stages per rank
  EXPECT_EQ(p.wgrad, ps::WGradMode::Fused);  // not given: the schedule's
  EXPECT_FALSE(p.fine_wgrad);
  const std::string eight = object_of(with(f, "layers_per_stage", "[6, 6, 6, 6, 6, 6, 6, 6]"));
  EXPECT_EQ(refusal(eight), "plan.json: line 1, column " + std::to_string(eight.find("[6, 6") + 1) +
                                ": field \"layers_per_stage\" has 8 entries but the schedule in "
                                "\"schedule_text\" has 4 model stages; give one layer count per "
                                "stage.");
}

TEST(PlanFile, RefusesANullBestWithTheReason) {
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

TEST(PlanFile, NamesAMissingOrMistypedField) {
  const Fields f = plan_fields(tuned());
  for (const char* key : {"schedule", "checkpoint", "pp", "dp", "tp", "zero", "sequence_parallel",
                          "microbatch_size", "microbatches", "layers_per_stage", "schedule_text"})
    EXPECT_EQ(refusal(object_of(without(f, key))),
              std::string("plan.json: line 1, column 1: field \"") + key +
                  "\" is missing; a plan from `pipesched tune --json` has it.");
  // Fields the tuner writes but a run does not need may be left out.
  for (const char* key : {"chunks", "slices", "wgrad", "step_time_s", "command", "makespan"})
    EXPECT_NO_THROW(ps::read_plan(object_of(without(f, key)), "plan.json")) << key;

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
    ps::read_plan(spaced, "plan.json");
    ADD_FAILURE() << "a string dp was read";
  } catch (const ps::parse_error& e) {
    EXPECT_EQ(e.line(), 1);
    EXPECT_EQ(e.column(), static_cast<int>(spaced.find("\"two\"")) + 1);
  }
}

TEST(PlanFile, RefusesAScheduleThatDoesNotParseOrValidate) {
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
    ps::read_plan(object_of(with(f, "schedule_text", str(broken))), "plan.json");
    ADD_FAILURE() << "a schedule with an action missing was read";
  } catch (const ps::invalid_schedule& e) {
    EXPECT_EQ(std::string(e.what()).rfind("plan.json, field \"schedule_text\": the schedule does "
                                          "not validate: ",
                                          0),
              0u)
        << e.what();
  }
}

TEST(PlanFile, ReadsAPlanFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("pipesched_run_plan_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "plan.json").string();
  std::ofstream(path) << object_of(plan_fields(tuned()), true) << "\n";
  EXPECT_EQ(ps::read_plan_file(path).schedule, tuned().schedule);
  std::ofstream(path) << "{\"best\": null}";
  try {
    ps::read_plan_file(path);
    ADD_FAILURE() << "a null best was read";
  } catch (const ps::parse_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": line 1, column 10: \"best\" is null", 0), 0u)
        << e.what();
  }
  const std::string missing = (dir / "nothing.json").string();
  try {
    ps::read_plan_file(missing);
    ADD_FAILURE() << "a missing file was read";
  } catch (const ps::error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot read plan file \"" + missing + "\": No such file or directory.");
  }
  try {
    ps::read_plan_file(dir.string());
    ADD_FAILURE() << "a directory was read";
  } catch (const ps::error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read plan file \"" + dir.string() +
                                         "\": it is a directory; give the path of a plan from "
                                         "`pipesched tune --json`.");
  }
  std::filesystem::remove_all(dir);
}

// The example of docs/executor.md, "Running a plan".
TEST(PlanFile, DocumentedUse) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("pipesched_run_plan_doc_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "plan.json").string();
  std::ofstream(path) << "{\"best\": " << object_of(plan_fields(tuned())) << "}\n";
  const int process = 2;  // this process's rank in MPI_COMM_WORLD
  // [run-plan]
  // pipesched tune ... --json > plan.json;  mpirun -np <pp·dp·tp> trainer plan.json
  const pipesched::tuning::Plan plan = pipesched::read_plan_file(path);
  // This process's place in the job of plan.grid().size() processes ...
  const pipesched::ProcessGrid::Coordinates me = plan.grid().coordinates(process);
  // ... and its pipeline rank's list: the stages it holds get plan.layers_per_stage layers,
  // each microbatch plan.microbatch_size sequences. Over MPI:
  //   pipesched::mpi::Groups groups(plan.grid());
  //   pipesched::mpi::Pipeline<Stage> pipe(plan.schedule, stages, groups, {.executor = options});
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
TEST(PlanFile, BoundsEveryNumericField) {
  const Fields f = plan_fields(tuned());
  EXPECT_EQ(field_refusal(with(f, "microbatch_size", "134217728")),
            "field \"microbatch_size\" is 134217728; it is a whole number from 1 to 65536 "
            "(sequences per microbatch).");
  EXPECT_EQ(field_refusal(with(f, "microbatch_size", "100000")),
            "field \"microbatch_size\" is 100000; it is a whole number from 1 to 65536 "
            "(sequences per microbatch).");
  EXPECT_NO_THROW(ps::read_plan(object_of(with(f, "microbatch_size", "65536"))));
  EXPECT_EQ(refusal(object_of(with(with(f, "dp", "16384"), "tp", "2"))),
            "plan.json: line 1, column 1: pp 4 × dp 16384 × tp 2 is 131072 processes; a plan "
            "runs on at most 65536 (the GPUs `pipesched tune --gpus` plans for).");
  EXPECT_NO_THROW(ps::read_plan(object_of(with(with(f, "dp", "8192"), "tp", "2"))));
  const std::string layers = field_refusal(with(f, "layers_per_stage", "[4, 4, 4, 2097152]"));
  EXPECT_NE(layers.find("field \"layers_per_stage\" holds 2097152; it is an array of layer "
                        "counts"),
            std::string::npos)
      << layers;
  EXPECT_NE(layers.find("at most 1048576."), std::string::npos) << layers;
}

// The fields that describe the schedule agree with it and with each other.
TEST(PlanFile, ChecksTheFieldsAgainstEachOtherAndTheSchedule) {
  const ps::tuning::Plan& best = tuned();  // interleaved-1f1b x4 with Mario's recomputes, fused
  ASSERT_EQ(best.base, "interleaved-1f1b");
  ASSERT_EQ(best.chunks, 4);
  const Fields f = plan_fields(best);
  EXPECT_EQ(field_refusal(with(f, "sequence_parallel", "true")),
            "field \"sequence_parallel\" is true but \"tp\" is 1; sequence parallelism splits "
            "the sequence over a tensor group, so a plan without tensor parallelism has false.");
  EXPECT_NO_THROW(ps::read_plan(object_of(with(with(f, "sequence_parallel", "true"), "tp", "2"))));
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
  EXPECT_NO_THROW(ps::read_plan(object_of(z)));
  const std::string fused = field_refusal(with(z, "wgrad", str("fused")));
  EXPECT_EQ(fused.rfind("field \"wgrad\" is \"fused\" but the schedule in \"schedule_text\" "
                        "splits its backward (",
                        0),
            0u)
      << fused;
}

// Every plan of a search over every base, checkpoint mode and backward mode reads back: the
// checks above refuse none of what the tuner writes.
TEST(PlanFile, ReadsEveryPlanOfASearchOverEveryBase) {
  ps::tuning::Request req{.ranks = 4, .global_batch = 8};
  req.bases.clear();
  for (const ps::GeneratorInfo& g : ps::generators())
    req.bases.push_back(std::string(g.name));
  req.checkpoints.assign(std::begin(ps::checkpoint_modes), std::end(ps::checkpoint_modes));
  req.slices = {1, 2};
  req.fine_wgrad = true;
  req.budget = ps::MemoryBudget{.all = 3, .per_rank = {}};
  req.threads = 1;
  const ps::tuning::Result r = ps::tune(req, ps::UniformCost{.f = 1, .b = 2});
  int read = 0;
  std::set<std::string> bases;
  for (const ps::tuning::Baseline& b : r.baselines) {
    if (!b.plan) continue;
    SCOPED_TRACE(b.plan->schedule.name);
    const ps::tuning::Plan p = ps::read_plan(object_of(plan_fields(*b.plan)), "plan.json");
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
TEST(PlanFile, RefusesTooManyActionsOrValuesBeforeBuildingThem) {
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

// ---------------------------------------------------------------------------------------
// write_plan, read_plan and cost_of: the plan file is one plan type written and read back.

namespace {

// The plans of a small cluster search (GPT-3 1.3B, sequence 1024, on 8 A100s in nodes of 4):
// its best and each pair's best, each with the TransformerCost it was simulated under.
const std::vector<ps::tuning::Plan>& cluster_plans() {
  static const std::vector<ps::tuning::Plan> plans = [] {
    ps::tuning::ClusterRequest c;
    c.gpus = 8;
    c.gpus_per_node = 4;
    c.global_batch = 16;
    c.zero = 1;
    c.search.bases = {"1f1b", "zb-h1", "slice-pipe"};
    c.search.slices = {1, 2};
    c.search.microbatch_sizes = {1, 2};
    c.search.checkpoints = {ps::CheckpointMode::None, ps::CheckpointMode::Mario};
    c.search.threads = 1;
    ps::ModelShape m = ps::presets::find_model("gpt3-1.3b");
    m.sequence = 1024;
    const ps::tuning::Result r = ps::tune_cluster(c, m, ps::presets::find_device("a100-40gb"));
    std::vector<ps::tuning::Plan> out;
    if (r.best) out.push_back(*r.best);
    for (const ps::tuning::Baseline& b : r.baselines)
      if (b.plan) out.push_back(*b.plan);
    // A plan of sliced microbatches for certain (slice-pipe may win above with more chunks and
    // whole microbatches, its reductions overlapped).
    c.search.bases = {"slice-pipe"};
    c.search.slices = {2};
    const ps::tuning::Result sliced = ps::tune_cluster(c, m, ps::presets::find_device("a100-40gb"));
    if (sliced.best) out.push_back(*sliced.best);
    return out;
  }();
  return plans;
}

void expect_same_plan(const ps::tuning::Plan& back, const ps::tuning::Plan& p) {
  EXPECT_EQ(back.schedule, p.schedule);
  EXPECT_EQ(back.base, p.base);
  EXPECT_EQ(back.checkpoint, p.checkpoint);
  EXPECT_EQ(back.wgrad, p.wgrad);
  EXPECT_EQ(back.fine_wgrad, p.fine_wgrad);
  EXPECT_EQ(back.fitted, p.fitted);
  EXPECT_EQ(back.data, p.data);
  EXPECT_EQ(back.tensor, p.tensor);
  EXPECT_EQ(back.zero, p.zero);
  EXPECT_EQ(back.sequence_parallel, p.sequence_parallel);
  EXPECT_EQ(back.gpus, p.gpus);
  EXPECT_EQ(back.global_batch, p.global_batch);
  EXPECT_EQ(back.microbatch_size, p.microbatch_size);
  EXPECT_EQ(back.microbatches, p.microbatches);
  EXPECT_EQ(back.chunks, p.chunks);
  EXPECT_EQ(back.slices, p.slices);
  EXPECT_EQ(back.warmup, p.warmup);
  EXPECT_EQ(back.layers_per_stage, p.layers_per_stage);
  EXPECT_EQ(back.makespan, p.makespan);  // written in the shortest form that reads back exactly
  EXPECT_EQ(back.throughput, p.throughput);
  EXPECT_EQ(back.bubble_ratio, p.bubble_ratio);
  EXPECT_EQ(back.peak_per_rank, p.peak_per_rank);
  EXPECT_EQ(back.peak_memory, p.peak_memory);
  EXPECT_EQ(back.recomputes, p.recomputes);
  EXPECT_EQ(back.mfu, p.mfu);
  EXPECT_EQ(back.mfu_usual, p.mfu_usual);
  EXPECT_EQ(back.memory_unit, p.memory_unit);
}

}  // namespace

TEST(PlanFile, AClusterPlanReadsBackWithItsCostModelAndSimulatesToItsStepTime) {
  const std::vector<ps::tuning::Plan>& plans = cluster_plans();
  ASSERT_GE(plans.size(), 4u);
  bool sliced = false, sharded = false;
  for (const ps::tuning::Plan& p : plans) {
    SCOPED_TRACE(ps::describe(p));
    sliced = sliced || p.slices > 1;
    sharded = sharded || p.zero > 0;
    // The tuner's plan holds the cost model it was simulated under.
    const ps::TransformerCost& planned = ps::cost_of<ps::TransformerCost>(p);
    EXPECT_EQ(planned.model.microbatch_size, p.microbatch_size);
    EXPECT_EQ(planned.parallel.data, p.data);
    EXPECT_DOUBLE_EQ(ps::simulate(p.schedule, planned).makespan, p.makespan);
    // Written and read back: the same plan, and the same cost model, field by field.
    const ps::tuning::Plan back = ps::read_plan(ps::plan_json(p, "a command"), "plan.json");
    expect_same_plan(back, p);
    const ps::TransformerCost& read = ps::cost_of<ps::TransformerCost>(back);
    EXPECT_EQ(ps::model_json(read.model, "m"), ps::model_json(planned.model, "m"));
    EXPECT_EQ(ps::device_json(read.device), ps::device_json(planned.device));
    EXPECT_EQ(read.slice_lengths, planned.slice_lengths);
    EXPECT_EQ(read.parallel.tensor, planned.parallel.tensor);
    EXPECT_EQ(read.parallel.zero, planned.parallel.zero);
    EXPECT_EQ(read.parallel.layers, planned.parallel.layers);
    EXPECT_EQ(read.parallel.whole_step, planned.parallel.whole_step);
    EXPECT_EQ(read.wgrad_split, planned.wgrad_split);
    EXPECT_DOUBLE_EQ(ps::simulate(back.schedule, read).makespan, p.makespan);
    // And written again, the same text.
    EXPECT_EQ(ps::plan_json(back, "a command"), ps::plan_json(p, "a command"));
  }
  EXPECT_TRUE(sliced) << "no plan cuts its microbatches into slices";
  EXPECT_TRUE(sharded) << "no plan shards its optimizer state";
}

TEST(PlanFile, AUniformCostPlanReadsBackWithItsCostModel) {
  const ps::tuning::Plan& p = tuned();
  const ps::tuning::Plan back = ps::read_plan(ps::plan_json(p), "plan.json");
  expect_same_plan(back, p);
  const ps::UniformCost& c = ps::cost_of<ps::UniformCost>(back);
  EXPECT_EQ(c.f, 1);
  EXPECT_EQ(c.b, 2);
  EXPECT_EQ(ps::simulate(back.schedule, c).makespan, p.makespan);
  // Its memory is in units: no seconds or bytes are written.
  const ps::json::Value doc = ps::json::parse(ps::plan_json(p));
  EXPECT_TRUE(doc.find("step_time_s")->is_null());
  EXPECT_TRUE(doc.find("peak_memory_bytes")->is_null());
  EXPECT_EQ(doc.find("command"), nullptr);  // none given
}

TEST(PlanFile, APlanWithoutPerRankPeaksReadsBackOnceWritten) {
  // A plan file need not give "peak_memory"; written again it says [] and reads back.
  const ps::tuning::Plan p = ps::read_plan(object_of(without(plan_fields(tuned()), "peak_memory")));
  EXPECT_TRUE(p.peak_per_rank.empty());
  const ps::tuning::Plan back = ps::read_plan(ps::plan_json(p), "written.json");
  expect_same_plan(back, p);
  EXPECT_NE(refusal(object_of(with(plan_fields(tuned()), "peak_memory", "[1]")))
                .find("field \"peak_memory\" is an array; it is an array of the simulated peak "
                      "memory of each rank (4 numbers, 0 or more), or empty"),
            std::string::npos)
      << refusal(object_of(with(plan_fields(tuned()), "peak_memory", "[1]")));
}

TEST(PlanFile, RefusesABaseNameTheTextFormCannotKeep) {
  // Without a `name` line the schedule takes the base's name, which must survive being written.
  for (const char* base : {" zb-h1", "zb-h1 ", "", "zb\nh1"}) {
    const std::string why = refusal(object_of(with(plan_fields(tuned()), "schedule", str(base))));
    EXPECT_NE(why.find("it is the name of the plan's base schedule: not empty, without spaces"),
              std::string::npos)
        << why;
  }
}

TEST(PlanFile, CostOfNamesAMissingCostModelOrAnotherType) {
  const ps::tuning::Plan read = ps::read_plan(object_of(plan_fields(tuned())), "plan.json");
  try {
    (void)ps::cost_of<ps::UniformCost>(read);
    ADD_FAILURE() << "cost_of of a plan without a cost model did not throw";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("the plan holds no cost model"), std::string::npos)
        << e.what();
  }
  try {
    (void)ps::cost_of<ps::TransformerCost>(tuned());
    ADD_FAILURE() << "cost_of of another type did not throw";
  } catch (const ps::invalid_problem& e) {
    EXPECT_NE(std::string(e.what()).find("a cost model of another type"), std::string::npos)
        << e.what();
  }
}

TEST(PlanFile, RefusesACostModelThatDisagreesWithItsPlan) {
  ps::tuning::Plan p = cluster_plans().front();
  ps::TransformerCost c = ps::cost_of<ps::TransformerCost>(p);
  c.parallel.data = p.data + 1;
  p.cost = c;
  EXPECT_EQ(refusal(ps::plan_json(p)).find("plan.json, field \"cost_model\": line 1, column"), 0u)
      << refusal(ps::plan_json(p));
  EXPECT_NE(refusal(ps::plan_json(p))
                .find("the cost model's data-parallel degree is " + std::to_string(p.data + 1) +
                      " but the plan's is " + std::to_string(p.data)),
            std::string::npos)
      << refusal(ps::plan_json(p));
  c = ps::cost_of<ps::TransformerCost>(cluster_plans().front());
  c.model.microbatch_size = p.microbatch_size + 1;
  p.cost = c;
  EXPECT_NE(refusal(ps::plan_json(p)).find("the cost model's microbatch size is"),
            std::string::npos)
      << refusal(ps::plan_json(p));
  // A kind that is none, and a figure out of the cost model's range.
  std::string text = ps::plan_json(tuned());
  const std::string uniform = "\"kind\":\"uniform\"";
  ASSERT_NE(text.find(uniform), std::string::npos) << text;
  std::string other = text;
  other.replace(other.find(uniform), uniform.size(), "\"kind\":\"profiled\"");
  EXPECT_NE(refusal(other).find("field \"kind\" is \"profiled\" (a string); it is "
                                "\"transformer\" or \"uniform\""),
            std::string::npos)
      << refusal(other);
  // The embedding's split is a boolean.
  const std::string split = "\"input_vocabulary\":false";
  ASSERT_NE(text.find(split), std::string::npos) << text;
  std::string word = text;
  word.replace(word.find(split), split.size(), "\"input_vocabulary\":\"yes\"");
  EXPECT_NE(refusal(word).find("field \"input_vocabulary\" is \"yes\""), std::string::npos)
      << refusal(word);
  const std::string w = "\"w\":1,";
  ASSERT_NE(text.find(w), std::string::npos) << text;
  text.replace(text.find(w), w.size(), "\"w\":5,");
  EXPECT_NE(refusal(text).find("the cost model is out of range: "), std::string::npos)
      << refusal(text);
}

TEST(PlanFile, WritesAndReadsAFile) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("pipesched_plan_file_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "plan.json").string();
  ps::write_plan_file(path, cluster_plans().front(), "pipesched simulate ...");
  const ps::tuning::Plan back = ps::read_plan_file(path);
  expect_same_plan(back, cluster_plans().front());
  try {
    ps::write_plan_file((dir / "missing" / "plan.json").string(), back);
    ADD_FAILURE() << "writing into a missing folder did not throw";
  } catch (const ps::error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write the plan file"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace test_run_plan
