// Run-time access to every schedule generator by its command-line name.
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>

#include "pipesched/core/error.hpp"
#include "pipesched/core/placement.hpp"
#include "pipesched/schedule/dualpipe_v.hpp"
#include "pipesched/schedule/gpipe.hpp"
#include "pipesched/schedule/interleaved_1f1b.hpp"
#include "pipesched/schedule/looped_bfs.hpp"
#include "pipesched/schedule/one_f_one_b.hpp"
#include "pipesched/schedule/slice_pipe.hpp"
#include "pipesched/schedule/zero_bubble_h1.hpp"
#include "pipesched/schedule/zero_bubble_h2.hpp"
#include "pipesched/schedule/zero_bubble_v.hpp"

namespace pipesched {

//! A generator as the command line and the tuner see it.
struct GeneratorInfo {
  std::string_view name;     //!< command-line name, e.g. "1f1b"
  std::string_view summary;  //!< one line for `pipesched list`
  PlacementKind placement;   //!< the placement it builds
  int default_chunks;        //!< stages per rank when Problem.stages is 0
  bool chunks_vary;          //!< accepts chunks other than the default
  bool fused;                //!< accepts WGradMode::Fused
  bool split;                //!< accepts WGradMode::Split
  WGradMode default_wgrad;   //!< what it uses when not told
  Schedule (*generate)(Problem, WGradMode);
  bool slices = false;  //!< accepts Problem.slices > 1 (slice-level schedules)
  //! Generates with a given warm-up (forwards before rank 0's first backward); null for
  //! generators without that knob.
  Schedule (*generate_with_warmup)(Problem, WGradMode, int) = nullptr;
};

//! Every generator, in the order `pipesched list` shows them.
inline std::span<const GeneratorInfo> generators() {
  static const std::array<GeneratorInfo, 10> all{{
      {"gpipe", "all forwards, then all backwards (Huang et al. 2019; over slices: TeraPipe)",
       PlacementKind::Linear, 1, false, true, true, WGradMode::Fused, &schedule::gpipe, true},
      {"1f1b", "one forward, one backward after a warm-up (PipeDream-Flush)", PlacementKind::Linear,
       1, false, true, true, WGradMode::Fused, &schedule::one_f_one_b},
      {"interleaved-1f1b", "1F1B over looped virtual stages, Megatron-LM's order",
       PlacementKind::Interleaved, 2, true, true, true, WGradMode::Fused,
       &schedule::interleaved_1f1b},
      {"looped-bfs", "breadth-first over looped virtual stages (all chunk-0 forwards first)",
       PlacementKind::Interleaved, 2, true, true, true, WGradMode::Fused, &schedule::looped_bfs},
      {"zb-h1", "Zero Bubble H1: 1F1B memory, weight gradients fill the cooldown",
       PlacementKind::Linear, 1, false, false, true, WGradMode::Split, &schedule::zero_bubble_h1},
      {"zb-h2", "Zero Bubble H2: more warm-up forwards, weight gradients deferred",
       PlacementKind::Linear, 1, false, false, true, WGradMode::Split, &schedule::zero_bubble_h2},
      {"zb-v", "Zero Bubble V: two chunks per rank in a V, 1F1B's peak memory",
       PlacementKind::VShape, 2, false, false, true, WGradMode::Split, &schedule::zero_bubble_v},
      {"dualpipe-v", "DualPipeV: V placement, forward and backward overlapped in pairs",
       PlacementKind::VShape, 2, false, true, true, WGradMode::Split, &schedule::dualpipe_v},
      {"seq-1f1b", "1F1B over (microbatch, slice) units: a rank holds slices, not microbatches",
       PlacementKind::Linear, 1, false, true, true, WGradMode::Fused, &schedule::seq_1f1b, true},
      {"slice-pipe",
       "MEPipe's sequence x virtual pipeline: slices over looped chunks, tunable warm-up",
       PlacementKind::Interleaved, 2, true, true, true, WGradMode::Fused,
       [](Problem p, WGradMode w) { return schedule::slice_pipe(p, w); }, true,
       [](Problem p, WGradMode w, int warmup) {
         return schedule::slice_pipe(p, w, {.warmup = warmup});
       }},
  }};
  return all;
}

//! The generator called `name`; throws invalid_problem listing the known names.
inline const GeneratorInfo& find_generator(std::string_view name) {
  for (const GeneratorInfo& g : generators())
    if (g.name == name) return g;
  std::string known;
  for (const GeneratorInfo& g : generators())
    known += (known.empty() ? "" : ", ") + std::string(g.name);
  throw invalid_problem("unknown schedule '" + std::string(name) + "'; known schedules: " + known +
                        ".");
}

}  // namespace pipesched
