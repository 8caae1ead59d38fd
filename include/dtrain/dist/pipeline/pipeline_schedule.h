// Pipeline schedules: the order in which one rank of a pipeline runs the forward and
// backward passes of its micro-batches, and the messages it exchanges around each pass.
// Pure functions of (schedule, stages, stage, virtual stages, micro-batches), so every
// rank derives its own part of the same plan and the plans can be checked without
// communicators (tests/dist/test_pipeline_schedule.cpp replays them under MPI's and
// NCCL's matching rules).
//
// The model is cut into K x V consecutive chunks ("virtual stages"). V = 1 except for the
// interleaved schedule, where rank s holds chunks s, s + K, ..., s + (V-1) K (virtual stage
// c lives on rank c mod K as that rank's chunk c / K), and ZB-V, where rank s holds chunks s
// and 2K-1-s (a V: the activations run down the ranks and back up, so the first and the
// last chunk share rank 0 and chunks K-1 and K meet on rank K-1 without a message).
//   GPipe: every forward, then every backward. Simple; each rank keeps all M micro-batches'
//     activations until its backwards start.
//   1F1B: K - s - 1 forwards to fill the pipeline, then one forward and one backward in
//     turn, then the remaining backwards (PipeDream-flush): the same bubble as GPipe,
//     (K-1)/(M+K-1) of the step, but at most K - s micro-batches' activations alive.
//   Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's order): V chunks per rank,
//     micro-batches taken K at a time through each chunk in turn; the bubble shrinks to
//     (K-1)/(V (M+K-1)) at the cost of V times the messages. Needs M divisible by K.
// The zero-bubble schedules (Qi et al. 2023, "Zero Bubble Pipeline Parallelism") split each
// backward pass in two (autograd/split_backward.h): B, the input's gradient, which the
// previous stage waits for, and W, the weights' gradients, which no one waits for and
// which fill what would be bubbles.
//   ZB-H1: 1F1B's order with the W passes apart: stage s runs its first s backwards as B
//     alone, then each B followed by the W of the oldest micro-batch whose W is due, the
//     rest at the end. At most K micro-batches' activations alive on any stage (1F1B's
//     peak, now on every stage); with F = B = W the bubble is (K-1)/(3M+K-1), a third of
//     1F1B's.
//   ZB-V: two chunks per rank in the V shape; every rank runs, as soon as its inputs are
//     there, the first of: a B (the first chunk's first), a forward (the second chunk's
//     first) while fewer than 2K chunk activations are alive (1F1B's peak memory, in
//     half-size chunks), a W. The order comes from running that rule for every rank with
//     F = B = W (each rank runs it for all, so they agree); its bubble there is 0.06 at
//     K = 4, M = 8, 0.02 at K = 2, M = 8 (simulated_bubble).//
// Messages: before each step a rank issues, as one batch, the sends of its previous
// step's outputs and the receives of this step's inputs, then waits for the receives. A
// step is one pass, except in the interleaved schedule's steady state, where it is a
// forward and a backward together (Megatron-LM's pairing for each: with one pass per step
// the interleaved order can leave two neighbours each waiting for the other). On NCCL,
// whose sends wait for their receives and whose batches run in issue order, this is what
// keeps two neighbours from both sending first; the tests replay every plan to check that
// none can stall that way and that every pair of ranks issues its messages in the same
// order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::dist {

enum class PipelineSchedule : std::uint8_t { GPipe, OneFOneB, Interleaved, ZeroBubbleH1, ZeroBubbleV };
const char* schedule_name(PipelineSchedule s);             // "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"
PipelineSchedule parse_schedule(const std::string& name);  // throws naming the text
// Whether the schedule splits backward passes into B and W (the zero-bubble ones).
bool splits_backward(PipelineSchedule s);
// The chunks per rank the schedule takes: 2 for ZB-V, 1 for the others but Interleaved
// (which takes any V >= 2: 0 here).
int fixed_virtual_stages(PipelineSchedule s);

struct PipelineShape {
  int stages = 1;          // K: ranks in the pipeline
  int virtual_stages = 1;  // V: chunks per rank (>= 2 for Interleaved, 1 otherwise)
  int micro_batches = 1;   // M per step
};

// Throws, with the reason, when `schedule` cannot run `shape`.
void check_schedule(PipelineSchedule schedule, const PipelineShape& shape);

// Where the chunks live: the virtual stage of rank `stage`'s chunk `chunk`, and the rank
// that holds virtual stage `virtual_stage`.
int virtual_stage_of(PipelineSchedule schedule, const PipelineShape& shape, int stage, int chunk);
int stage_of(PipelineSchedule schedule, const PipelineShape& shape, int virtual_stage);

struct PipelineAction {
  // Backward: the whole backward pass, or B (the input's gradient) when the schedule splits
  // it; Weight: W, the weights' gradients of a split backward.
  enum class Kind : std::uint8_t { Forward, Backward, Weight };
  Kind kind = Kind::Forward;
  int chunk = 0;  // this rank's chunk (0..V-1)
  int micro = 0;  // micro-batch (0..M-1)
};

// One message: an activation from virtual stage `boundary` to boundary + 1, or the
// gradient of that activation from boundary + 1 back to `boundary`, for micro-batch `micro`.
struct PipelineMessage {
  enum class Kind : std::uint8_t { Activation, Gradient };
  Kind kind = Kind::Activation;
  bool send = true;  // false: a receive
  int peer = 0;      // the other rank
  int boundary = 0;
  int micro = 0;
};

// One or two passes and the batch of messages issued just before them: the sends of the
// previous step's outputs, then the receives of these passes' inputs.
struct PipelineStep {
  std::vector<PipelineMessage> messages;
  std::vector<PipelineAction> actions;
};

struct PipelinePlan {
  std::vector<PipelineStep> steps;
  std::vector<PipelineMessage> tail;  // the last pass's sends
};

// This rank's passes in order. forward_only: evaluation (no backward, no gradients).
std::vector<PipelineAction> schedule_actions(PipelineSchedule schedule, const PipelineShape& shape, int stage,
                                             bool forward_only = false);
// The passes with their messages.
PipelinePlan schedule_plan(PipelineSchedule schedule, const PipelineShape& shape, int stage, bool forward_only = false);

// The idle share of a step that the schedule leaves in theory, with every pass of every
// chunk taking the same time: (K-1) / (V (M + K - 1)).
double theoretical_bubble(const PipelineShape& shape);

// One chunk's pass times on a rank, in any unit (W's is part of the backward for a schedule
// that does not split it).
struct PassTimes {
  double forward = 1, backward = 1, weight = 1;
};
// The idle share of a step, averaged over the ranks, when every rank runs its passes in the
// schedule's order, each as soon as its inputs exist, with rank s's passes taking
// times[s] (one entry: every rank's; K x V entries: virtual stage c's passes times[c]) and
// messages taking no time: the schedule's theory for measured pass times.
double simulated_bubble(PipelineSchedule schedule, const PipelineShape& shape, const std::vector<PassTimes>& times);

}  // namespace dtrain::dist
