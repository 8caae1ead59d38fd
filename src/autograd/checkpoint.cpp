#include "dtrain/autograd/checkpoint.h"

#include "autograd/recompute_engine.h"
#include "dtrain/autograd/autocast.h"

#include <optional>

namespace dtrain {
namespace {

thread_local int t_recomputing = 0;

// What the first run saw that the recomputation must see again.
struct FirstRun {
  Generator* generator;  // never null
  std::uint64_t seed, offset;
  std::optional<DType> autocast;
};

// Sets the generator to where it stood before the first run, and back afterwards (the
// outer computation goes on from its own state, also when the recomputation throws).
class Replay {
 public:
  explicit Replay(const FirstRun& first)
      : generator_(*first.generator),
        seed_(generator_.seed()),
        offset_(generator_.offset()),
        autocast_(first.autocast.value_or(DType::bf16), first.autocast.has_value()) {
    generator_.set_state(first.seed, first.offset);
    ++t_recomputing;
  }
  ~Replay() {
    --t_recomputing;
    generator_.set_state(seed_, offset_);
  }
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

 private:
  Generator& generator_;
  std::uint64_t seed_, offset_;
  EnableGradGuard grad_;  // a backward may run under NoGradGuard
  AutocastGuard autocast_;
};

}  // namespace

bool recomputing() { return t_recomputing > 0; }

Variable activation_checkpoint(const std::function<Variable(const Variable&)>& fn, const Variable& x,
                               Generator* generator) {
  DTRAIN_CHECK(x.defined(), "activation_checkpoint: the input is undefined");
  if (!grad_enabled()) return fn(x);
  Generator* gen = generator != nullptr ? generator : &default_generator();
  const FirstRun first{gen, gen->seed(), gen->offset(), autocast_dtype()};
  Variable out;
  std::vector<Variable> inputs{x};
  {
    detail::LeafRecorder recorder;
    NoGradGuard no_grad;
    out = fn(x.detach());
    inputs.insert(inputs.end(), recorder.leaves().begin(), recorder.leaves().end());
  }
  DTRAIN_CHECK(out.defined(), "activation_checkpoint: the function returned an undefined variable");
  // The node keeps x and the parameters; the activations fn made are gone already.
  return Variable(out.data(), std::move(inputs), [fn, first](std::vector<Variable>& in, const Tensor& grad_output) {
    // x's gradient when the pass asks for it (a split backward's weight pass hides it).
    Variable input(in[0].data(), in[0].requires_grad());
    Variable again;
    {
      Replay replay(first);
      again = fn(input);
    }
    DTRAIN_CHECK(
        again.defined() && again.shape() == grad_output.shape(),
        "activation_checkpoint: the recomputed output has shape {}, the first run's {}: the function must compute "
        "the same thing twice",
        again.defined() ? shape_str(again.shape()) : std::string("(undefined)"), shape_str(grad_output.shape()));
    // The parameters' gradients add up as this runs; their hooks fire in the outer pass,
    // which counts this node among their uses.
    if (again.requires_grad()) detail::backward_without_hooks(again, grad_output);
    if (in[0].requires_grad() && input.has_grad()) {
      Tensor grad = input.grad();
      input.zero_grad();
      in[0].add_grad(std::move(grad));
    }
  });
}

}  // namespace dtrain
