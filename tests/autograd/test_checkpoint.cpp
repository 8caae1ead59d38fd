// Activation checkpointing (checkpoint.h): gradients bit for bit those of the plain graph (an
// MLP on CPU f32: the recomputation runs the same ops on the same tensors), dropout's masks
// drawn again from the restored generator, leaf hooks once per backward also for parameters
// shared with other checkpoints and ops, nested checkpoints, an input without a gradient, the
// split backward, what the node keeps, and the errors.
#include "dtrain/autograd/checkpoint.h"
#include "dtrain/autograd/functions.h"
#include "dtrain/autograd/split_backward.h"
#include "dtrain/tensor/memory_stats.h"
#include "support/test_support.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

Variable leaf(const Shape& shape, std::uint64_t seed) { return Variable(test::random_tensor(shape, seed), true); }

// Two linear layers around a GELU and (p > 0) a dropout drawing from `gen`.
struct Mlp {
  Variable w1 = leaf({16, 8}, 1), b1 = leaf({16}, 2), w2 = leaf({8, 16}, 3), b2 = leaf({8}, 4);
  double p = 0;
  Generator* gen = nullptr;
  Variable operator()(const Variable& h) const {
    Variable a = gelu(linear(h, w1, b1));
    if (p > 0) a = dropout(a, p, gen);
    return linear(a, w2, b2);
  }
  std::vector<Variable> parameters() const { return {w1, b1, w2, b2}; }
};

// The gradients of x, then of the parameters, after one backward of
// loss = sum(f(x * x)^2) (x * x: an op before, so that x's gradient is passed on), with f the
// MLP run plainly or through a checkpoint.
std::vector<Tensor> gradients(const Mlp& mlp, bool checkpointed, Generator* saved = nullptr) {
  Variable x = leaf({4, 8}, 5);
  for (const Variable& p : mlp.parameters()) Variable(p).zero_grad();
  const auto fn = [&](const Variable& h) { return mlp(h); };
  Variable y = checkpointed ? activation_checkpoint(fn, mul(x, x), saved) : fn(mul(x, x));
  sum(mul(y, y)).backward();
  std::vector<Tensor> out{x.grad().clone()};
  for (const Variable& p : mlp.parameters()) out.push_back(p.grad().clone());
  return out;
}

void require_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("gradient " << i << " (0: x, then the parameters)");
    CHECK(max_abs_diff(a[i], b[i]) == 0);
  }
}

}  // namespace

TEST_CASE("checkpoint: the gradients of x and of the parameters are the plain graph's, bit for bit",
          "[autograd][cpu]") {
  Mlp mlp;
  require_equal(gradients(mlp, true), gradients(mlp, false));
}

TEST_CASE("checkpoint: dropout draws the same masks again from the restored generator", "[autograd][cpu]") {
  Generator gen(7);
  Mlp mlp;
  mlp.p = 0.4;
  mlp.gen = &gen;
  gen.set_state(7, 1000);
  const std::vector<Tensor> plain = gradients(mlp, false);
  const std::uint64_t after_plain = gen.offset();
  gen.set_state(7, 1000);
  require_equal(gradients(mlp, true, &gen), plain);
  CHECK(gen.offset() == after_plain);  // put back after the recomputation
  // Sensitivity: told about another generator, the recomputation draws other masks.
  Generator other(7);
  gen.set_state(7, 1000);
  const std::vector<Tensor> wrong = gradients(mlp, true, &other);
  CHECK(max_abs_diff(wrong[1], plain[1]) > 0);
  // nullptr: the default generator, which dropout without a generator draws from.
  mlp.gen = nullptr;
  default_generator().set_state(3, 0);
  const std::vector<Tensor> plain_default = gradients(mlp, false);
  default_generator().set_state(3, 0);
  require_equal(gradients(mlp, true), plain_default);
}

TEST_CASE("checkpoint: a leaf's hooks fire once per backward, after its last contribution, in and out of checkpoints",
          "[autograd][cpu]") {
  // w is read by two checkpoints and by an op outside them; v by one checkpoint only.
  const auto build = [](const Variable& x, const Variable& w, const Variable& v, bool checkpointed) {
    const auto f = [&](const Variable& h) { return tanh(mul(h, w)); };
    const auto g = [&](const Variable& h) { return mul(add(h, w), v); };
    const auto run = [&](const std::function<Variable(const Variable&)>& fn, const Variable& h) {
      return checkpointed ? activation_checkpoint(fn, h) : fn(h);
    };
    return sum(mul(run(g, run(f, x)), w));
  };
  Variable x = leaf({3, 5}, 11);
  Variable w = leaf({3, 5}, 12), v = leaf({3, 5}, 13);
  build(x, w, v, false).backward();
  const Tensor w_expected = w.grad().clone(), v_expected = v.grad().clone(), x_expected = x.grad().clone();
  for (Variable* p : {&x, &w, &v}) p->zero_grad();

  int w_fired = 0, v_fired = 0;
  Tensor w_at_hook, v_at_hook;
  w.register_grad_hook([&](Variable& p) {
    ++w_fired;
    w_at_hook = p.grad().clone();
  });
  v.register_grad_hook([&](Variable& p) {
    ++v_fired;
    v_at_hook = p.grad().clone();
  });
  build(x, w, v, true).backward();
  CHECK(w_fired == 1);
  CHECK(v_fired == 1);
  CHECK(max_abs_diff(w_at_hook, w_expected) == 0);  // complete when the hook saw it
  CHECK(max_abs_diff(v_at_hook, v_expected) == 0);
  CHECK(max_abs_diff(x.grad(), x_expected) == 0);
  build(x, w, v, true).backward();  // a second backward: once more each
  CHECK(w_fired == 2);
  CHECK(v_fired == 2);
}

TEST_CASE("checkpoint: nested checkpoints give the plain gradients, hooks once", "[autograd][cpu]") {
  Mlp inner, outer;
  outer.w1 = leaf({16, 8}, 21);
  const auto composed = [&](const Variable& h, bool checkpointed) {
    const auto in = [&](const Variable& a) { return inner(a); };
    const auto whole = [&](const Variable& a) {
      return outer(add(checkpointed ? activation_checkpoint(in, a) : in(a), a));
    };
    return checkpointed ? activation_checkpoint(whole, h) : whole(h);
  };
  std::vector<Variable> params = inner.parameters();
  for (const Variable& p : outer.parameters()) params.push_back(p);
  const auto run = [&](bool checkpointed) {
    Variable x = leaf({4, 8}, 22);
    for (Variable& p : params) p.zero_grad();
    Variable y = composed(mul(x, x), checkpointed);
    sum(mul(y, y)).backward();
    std::vector<Tensor> out{x.grad().clone()};
    for (const Variable& p : params) out.push_back(p.grad().clone());
    return out;
  };
  const std::vector<Tensor> plain = run(false);
  std::vector<int> fired(params.size(), 0);
  for (std::size_t i = 0; i < params.size(); ++i) params[i].register_grad_hook([&fired, i](Variable&) { ++fired[i]; });
  require_equal(run(true), plain);
  CHECK(fired == std::vector<int>(params.size(), 1));
}

TEST_CASE("checkpoint: an input without a gradient, a function without parameters, and no grad mode",
          "[autograd][cpu]") {
  Mlp mlp;
  const auto fn = [&](const Variable& h) { return mlp(h); };
  const Variable x(test::random_tensor({4, 8}, 31), false);
  sum(fn(x)).backward();
  std::vector<Tensor> plain;
  for (Variable p : mlp.parameters()) {
    plain.push_back(p.grad().clone());
    p.zero_grad();
  }
  Variable y = activation_checkpoint(fn, x);
  REQUIRE(y.requires_grad());  // through the parameters
  sum(y).backward();
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(max_abs_diff(mlp.parameters()[i].grad(), plain[i]) == 0);
  CHECK_FALSE(x.has_grad());

  const Variable constant = activation_checkpoint([](const Variable& h) { return mul(h, 2.0); }, x);
  CHECK_FALSE(constant.requires_grad());
  CHECK(max_abs_diff(constant.data(), mul(x.data(), 2.0)) == 0);

  int calls = 0;
  NoGradGuard no_grad;
  Variable z = activation_checkpoint(
      [&](const Variable& h) {
        ++calls;
        return mlp(h);
      },
      Variable(x.data(), true));
  CHECK(calls == 1);
  CHECK_FALSE(z.requires_grad());
}

TEST_CASE("checkpoint: recomputing() holds only while the function runs again", "[autograd][cpu]") {
  Variable w = leaf({3}, 41);
  std::vector<bool> seen;
  Variable y = activation_checkpoint(
      [&](const Variable& h) {
        seen.push_back(recomputing());
        return mul(h, w);
      },
      leaf({3}, 42));
  CHECK_FALSE(recomputing());
  sum(y).backward();
  CHECK(seen == std::vector<bool>{false, true});
  CHECK_FALSE(recomputing());
}

TEST_CASE("checkpoint: the split backward's two passes add what backward() adds", "[autograd][cpu]") {
  Mlp mlp;
  const std::vector<Tensor> plain = gradients(mlp, false);
  Variable x = leaf({4, 8}, 5);
  for (Variable p : mlp.parameters()) p.zero_grad();
  std::vector<int> fired(4, 0);
  std::vector<Variable> params = mlp.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) params[i].register_grad_hook([&fired, i](Variable&) { ++fired[i]; });
  Variable y = activation_checkpoint([&](const Variable& h) { return mlp(h); }, mul(x, x));
  Variable loss = sum(mul(y, y));
  // The weights (2-D) wait for W; the biases count in B, as the pipeline splits them.
  DeferredWeightGradients w = backward_inputs(loss, Tensor::ones({}), {mlp.w1, mlp.w2});
  CHECK(max_abs_diff(x.grad(), plain[0]) == 0);
  CHECK_FALSE(mlp.w1.has_grad());
  CHECK(fired == std::vector<int>{0, 1, 0, 1});
  w.run();
  for (std::size_t i = 0; i < params.size(); ++i) CHECK(max_abs_diff(params[i].grad(), plain[i + 1]) == 0);
  CHECK(fired == std::vector<int>{1, 1, 1, 1});
}

TEST_CASE("checkpoint: the node keeps its input, not the function's activations", "[autograd][cpu]") {
  // Ten wide layers: each plain one keeps its (64, 1024) input; the checkpoint keeps x.
  Variable w = leaf({1024, 1024}, 51);
  const auto fn = [&](const Variable& h) {
    Variable a = h;
    for (int i = 0; i < 10; ++i) a = tanh(linear(a, w, Variable()));
    return a;
  };
  const Variable x(test::random_tensor({64, 1024}, 52), true);
  const auto held = [&](bool checkpointed) {
    const std::size_t before = memory_stats(Device::cpu()).in_use_bytes;
    Variable y = checkpointed ? activation_checkpoint(fn, x) : fn(x);
    return static_cast<double>(memory_stats(Device::cpu()).in_use_bytes - before);
  };
  const double activation = 64.0 * 1024 * 4;
  CHECK(held(false) >= 10 * activation);
  CHECK(held(true) <= 1.5 * activation);  // the output only
}

TEST_CASE("checkpoint: a value from a graph outside the function is refused", "[autograd][cpu]") {
  Variable w = leaf({3}, 61);
  Variable outside = mul(w, w);  // computed with a graph, then read by the function
  CHECK_THROWS_WITH(activation_checkpoint([&](const Variable& h) { return mul(h, outside); }, leaf({3}, 62)),
                    Contains("checkpoint: the function read a variable that another op computed with a graph"));
  // The function computes something else the second time: named.
  int calls = 0;
  Variable y = activation_checkpoint([&](const Variable& h) { return ++calls == 1 ? mul(h, w) : sum(mul(h, w)); },
                                     leaf({3}, 63));
  CHECK_THROWS_WITH(sum(y).backward(), Contains("the recomputed output has shape [], the first run's [3]"));
}
