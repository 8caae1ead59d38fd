// The pipeline's engine (private to dist): runs one rank's plan (pipeline_schedule.h) over
// its chunks. It owns what lives between passes: each micro-batch's stage input and output
// until its backward (only the input with recomputation), the messages in flight, and the
// activation shapes agreed with the neighbours.
//
// Receives are posted in the plan's batches and waited for when the pass that needs them
// runs, so that nothing waits early and the transfer goes on meanwhile.
//
// Shapes: a receiver must size its buffer before the activation arrives. The first time
// an activation of a given micro-batch size crosses a boundary, the sender also sends its
// shape and dtype over the MPI communicator (a small header, sent before the batch that
// holds the activation, and received before the batch that receives it); both sides then
// reuse it. A gradient has the shape of the activation it belongs to, which the stage
// that sent the activation knows.
//
// Split backward (the zero-bubble schedules): a Backward action runs B alone
// (backward_inputs over the chunk's weights of two or more dimensions but narrow heads:
// see the constructor), keeping the weight
// pass, which the micro-batch's Weight action runs later; between the two those weights
// have not yet received that micro-batch's gradients.
//
// Waits filled with W: over MPI, when a pass's input has not arrived yet and the plan's
// next W pass can run (its B is done), that W runs first, and again while the input is
// still on its way; each W so run is skipped where the plan put it. Every chunk's W passes
// keep the plan's order (its gradients accumulate in the same order, so the results do not
// depend on the timing), and a W sends nothing, so the messages keep theirs. A schedule's
// order is computed for equal pass times; this takes up the difference with the real ones
// (a stage whose input needs no gradient has a short B; the last stage's has the loss).
// NCCL's receives complete on the stream, so the host never waits there: no filling.
//
// A B that the plan follows at once with its own W, on virtual stage 0 (which sends no
// gradient back, so nothing waits for its end), runs as one whole backward instead: a
// split would only keep each GEMM's output gradient from B to W (ZB-H1's first stage).
#pragma once

#include "dtrain/autograd/split_backward.h"
#include "dtrain/autograd/variable.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/dist/pipeline/pipeline_schedule.h"
#include "dtrain/layers/module.h"

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

namespace dtrain::dist {

class PipelineExecutor {
 public:
  struct Config {
    CommunicatorPtr comm;           // the pipeline's ranks, in stage order (headers; CPU tensors)
    CommunicatorPtr tensor_comm;    // the model's tensors: NCCL over `comm` on GPUs, else `comm`
    Device device = Device::cpu();  // the chunks'
    PipelineSchedule schedule = PipelineSchedule::OneFOneB;
    int virtual_stages = 1;
    bool recompute = false;                 // keep only each chunk's input; run its forward again in backward
    std::function<void()> after_pass = {};  // after every pass (ZeRO-3 frees the stage's parameters)
  };
  // The last virtual stage's work on its output for micro-batch `micro`: the loss to
  // backward (weighted and scaled), or an undefined Variable when there is no backward.
  // `record` is false when recomputation runs it a second time (count statistics once).
  using LastStageFn = std::function<Variable(const Variable& output, int micro, bool record)>;
  // Called before each pass that adds gradients to the chunk's parameters: a backward, or
  // where the schedule splits it B (1-D parameters) and W (the others). `last` when no other
  // pass of that kind and chunk follows in this step: when a data-parallel wrapper must
  // reduce the gradients that kind of pass gives the chunk's parameters.
  using BeforeGradientsFn = std::function<void(int chunk, PipelineAction::Kind kind, bool last)>;

  // `chunks`: this rank's chunks in order (chunk v is virtual_stage_of(schedule, ..., v)).
  PipelineExecutor(Config config, std::vector<nn::ModulePtr> chunks);

  // Seconds spent in one run (host clock: on a GPU, the time to queue the work).
  struct Timing {
    double wait_s = 0;               // waiting for messages from the neighbours
    int weights_early = 0;           // W passes run while a pass's input was on its way
    std::vector<PassTimes> chunk_s;  // in each of this rank's chunks' F, B (or whole backwards) and W
  };
  // One step over micro-batches whose inputs (used by virtual stage 0; every rank passes
  // them, for their sizes) are `inputs`. `train`: forwards and backwards; otherwise
  // forwards only (the caller holds NoGradGuard). `autocast`: the chunks' forwards (and
  // `last`) under AutocastGuard. Sends are waited on before it returns.
  Timing run(const std::vector<Tensor>& inputs, bool train, std::optional<DType> autocast, const LastStageFn& last,
             const BeforeGradientsFn& before_gradients = {});

 private:
  struct Live {
    Variable input, output, loss;
    Shape output_shape;  // kept with recomputation too: the gradient's buffer
    DType output_dtype = DType::f32;
    std::uint64_t rng_seed = 0, rng_offset = 0;  // the generator before a recomputed forward
  };
  using Key = std::pair<int, int>;  // (chunk, micro)

  int virtual_stage(int chunk) const;
  int chunk_of(int virtual_stage) const;  // this rank's chunk holding it
  bool here(int virtual_stage) const;     // whether this rank holds it
  bool is_last(int chunk) const { return virtual_stage(chunk) == stages_ * config_.virtual_stages - 1; }
  // The chunk's output; on the last virtual stage also sets *loss from `last`.
  Variable forward_chunk(int chunk, const Variable& input, int micro, bool record, const LastStageFn& last,
                         Variable* loss);
  void forward(const PipelineAction& a, bool train, const LastStageFn& last);
  // whole: B and W at once (see the top) where the schedule splits the backward.
  void backward(const PipelineAction& a, const LastStageFn& last, bool whole);
  void weight(const PipelineAction& a);
  // Runs `a` (with the data-parallel hook before a gradient pass), timing it; `with_weight`:
  // a B that runs its W too.
  void run_pass(const PipelineAction& a, bool train, const LastStageFn& last, const BeforeGradientsFn& before_gradients,
                bool with_weight = false);
  // Over MPI: while the receive `a` will wait for is still on its way and the plan's next
  // W pass can run, runs that W now.
  void fill_wait(const PipelineAction& a, bool train, const LastStageFn& last,
                 const BeforeGradientsFn& before_gradients);
  // The receive that `a` will wait for (null: none, or it was already waited for).
  WorkPtr awaited_receive(const PipelineAction& a) const;
  // Where a pass puts what it produced for the virtual stage `to`: the outbox, or straight
  // into the inbox when this rank holds that stage too (ZB-V's turn).
  Tensor& deliver(PipelineMessage::Kind kind, int boundary, int micro, int to);
  // Issues `messages` (over NCCL as one batch; over MPI the sends first) without waiting
  // for the receives, which the passes that need them wait for (take_input).
  void exchange(const std::vector<PipelineMessage>& messages);
  // A buffer for the message `m` will bring (its activation's shape, learned from the header
  // the first time).
  Tensor receive_buffer(const PipelineMessage& m);
  // What a pass reads from the neighbour (its receive waited for now) or from this rank's
  // other chunk.
  Tensor take_input(PipelineMessage::Kind kind, int boundary, int micro);
  int tag(const PipelineMessage& m) const;
  int header_tag(int boundary) const;

  Config config_;
  std::vector<nn::ModulePtr> chunks_;
  int stages_, rank_;
  const std::vector<Tensor>* inputs_ = nullptr;  // during run()
  std::optional<DType> autocast_;
  std::map<Key, Live> live_;
  std::map<Key, DeferredWeightGradients> deferred_;  // B done, W to run
  std::deque<Key> weights_ahead_;                    // the plan's W passes not run yet, in its order
  std::map<std::pair<int, PipelineAction::Kind>, int> gradient_passes_left_;  // per chunk and kind
  std::vector<std::vector<Variable>> weights_;                                // each chunk's weights that W computes
  // Messages: what a pass produced for sending, what arrived, what is in flight.
  std::map<std::tuple<int, int, int>, Tensor> outbox_, inbox_;  // (kind, boundary, micro)
  std::map<std::tuple<int, int, int>, WorkPtr> receiving_;      // posted receives, waited for at use
  std::vector<std::pair<WorkPtr, Tensor>> sends_;               // with the tensor where the transport needs it kept
  // Activation shapes by (boundary, rows): announced (as sender) or learned (receiver).
  std::set<std::pair<int, std::int64_t>> announced_;
  std::map<std::pair<int, std::int64_t>, std::pair<Shape, DType>> learned_;
  Timing timing_;
};

}  // namespace dtrain::dist
