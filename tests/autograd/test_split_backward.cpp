// The split backward (split_backward.h) for zero-bubble pipelines: the input pass leaves
// every weight without a gradient and its hooks unfired, and with the weight pass adds
// exactly what backward() adds, bit for bit, through the ops with weights (linear, conv2d,
// batch norm's affine, layer norm, a plain product), a weight used twice, an op that reads
// a weight through a unary op, and the input's own gradient; a second run is refused.
#include "dtrain/autograd/functions.h"
#include "dtrain/autograd/split_backward.h"
#include "support/test_support.h"

#include <functional>

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

struct Net {
  Variable x;                     // the stage's input (requires grad)
  std::vector<Variable> weights;  // the parameters
  Variable loss;
};

using Build = std::function<Net()>;

Variable leaf(const Shape& shape, std::uint64_t seed) { return Variable(test::random_tensor(shape, seed), true); }

// The parameters' and the input's gradients after backward(), from a fresh net.
std::vector<Tensor> plain_gradients(const Build& build) {
  Net n = build();
  n.loss.backward();
  std::vector<Tensor> out{n.x.grad().clone()};
  for (const Variable& w : n.weights) out.push_back(w.grad().clone());
  return out;
}

const std::vector<std::pair<std::string, Build>>& nets() {
  static const std::vector<std::pair<std::string, Build>> all{
      {"linear, relu, linear",
       [] {
         Net n{leaf({4, 6}, 1), {leaf({5, 6}, 2), leaf({5}, 3), leaf({3, 5}, 4), leaf({3}, 5)}, {}};
         Variable h = relu(linear(n.x, n.weights[0], n.weights[1]));
         n.loss = sum(mul(linear(h, n.weights[2], n.weights[3]), linear(h, n.weights[2], n.weights[3])));
         return n;
       }},
      {"conv2d, batch norm, max pool",
       [] {
         Net n{leaf({2, 3, 6, 6}, 6), {leaf({4, 3, 3, 3}, 7), leaf({4}, 8), leaf({4}, 9), leaf({4}, 10)}, {}};
         Variable c = conv2d(n.x, n.weights[0], n.weights[1], Conv2dParams{.pad_h = 1, .pad_w = 1});
         Variable b = batch_norm_relu_train(c, n.weights[2], n.weights[3], 1e-5);
         n.loss =
             sum(mul(max_pool2d(b, Pool2dParams{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2}), 0.5));
         return n;
       }},
      {"layer norm, a product with a weight, a weight through exp",
       [] {
         Net n{leaf({3, 8}, 11), {leaf({8}, 12), leaf({8}, 13), leaf({8}, 14)}, {}};
         Variable y = layer_norm(n.x, 1, n.weights[0], n.weights[1], 1e-5);
         n.loss = sum(mul(mul(y, n.weights[2]), exp(n.weights[2])));
         return n;
       }},
  };
  return all;
}

}  // namespace

TEST_CASE("The split backward's input pass leaves the weights alone, and both passes add what backward() adds",
          "[autograd][cpu]") {
  for (const auto& [name, build] : nets()) {
    INFO(name);
    const std::vector<Tensor> expected = plain_gradients(build);
    Net n = build();
    std::vector<int> fired(n.weights.size(), 0);
    for (std::size_t i = 0; i < n.weights.size(); ++i) {
      n.weights[i].register_grad_hook([&fired, i](Variable&) { ++fired[i]; });
    }
    DeferredWeightGradients w = backward_inputs(n.loss, Tensor::ones({}, n.loss.data().options()), n.weights);
    // B: the input's gradient is complete, the weights have none and no hook has fired.
    CHECK(max_abs_diff(n.x.grad(), expected[0]) == 0);
    for (std::size_t i = 0; i < n.weights.size(); ++i) {
      CHECK_FALSE(n.weights[i].has_grad());
      CHECK(fired[i] == 0);
    }
    CHECK(w.pending());
    w.run();
    CHECK_FALSE(w.pending());
    for (std::size_t i = 0; i < n.weights.size(); ++i) {
      INFO("weight " << i);
      REQUIRE(n.weights[i].has_grad());
      CHECK(max_abs_diff(n.weights[i].grad(), expected[i + 1]) == 0);
      CHECK(fired[i] == 1);  // once, after its last contribution
    }
    CHECK_THROWS_WITH(w.run(), Contains("the weight pass already ran"));
  }
}

TEST_CASE("The split backward adds into gradients the weights already hold, and a dropped weight pass adds nothing",
          "[autograd][cpu]") {
  const Build& build = nets().front().second;
  const std::vector<Tensor> once = plain_gradients(build);
  Net n = build();
  for (const Variable& w : n.weights) {
    Variable(w).set_grad(Tensor::ones(w.shape()));  // an earlier micro-batch's
  }
  { DeferredWeightGradients dropped = backward_inputs(n.loss, Tensor::ones({}), n.weights); }
  for (const Variable& w : n.weights) CHECK(max_abs_diff(w.grad(), Tensor::ones(w.shape())) == 0);
  Net again = build();
  for (const Variable& w : again.weights) Variable(w).set_grad(Tensor::ones(w.shape()));
  DeferredWeightGradients w = backward_inputs(again.loss, Tensor::ones({}), again.weights);
  w.run();
  for (std::size_t i = 0; i < again.weights.size(); ++i) {
    CHECK(max_abs_diff(again.weights[i].grad(), add(once[i + 1], Tensor::ones(once[i + 1].shape()))) <= 1e-6);
  }
}

TEST_CASE("backward_inputs refuses a weight that is not a leaf requiring grad", "[autograd][cpu]") {
  Net n = nets().front().second();
  Variable constant(Tensor::ones({2}), false);
  CHECK_THROWS_WITH(backward_inputs(n.loss, Tensor::ones({}), {constant}),
                    Contains("a weight must be a leaf that requires grad"));
}

TEST_CASE("A weight whose op computes its gradient regardless counts in the input pass, never twice",
          "[autograd][cpu]") {
  // An op whose backward fills both inputs' gradients without asking whether they are wanted.
  const auto careless_add = [](const Variable& a, const Variable& b) {
    return Variable(add(a.data(), b.data()), {a, b}, [](std::vector<Variable>& in, const Tensor& g) {
      in[0].add_grad(g);
      in[1].add_grad(g);
    });
  };
  const auto build = [&] {
    Net n{leaf({2, 3}, 21), {leaf({2, 3}, 22), leaf({2, 3}, 23)}, {}};
    // weights[1] also takes a careful op, whose part W adds: the hook waits for both.
    n.loss = sum(mul(careless_add(mul(n.x, n.x), n.weights[0]), mul(n.x, n.weights[1])));
    n.loss = add(n.loss, sum(careless_add(n.x, n.weights[1])));
    return n;
  };
  const std::vector<Tensor> expected = plain_gradients(build);
  Net n = build();
  std::vector<int> fired(2, 0);
  for (int i = 0; i < 2; ++i) n.weights[i].register_grad_hook([&fired, i](Variable&) { ++fired[i]; });
  DeferredWeightGradients w = backward_inputs(n.loss, Tensor::ones({}), n.weights);
  CHECK(max_abs_diff(n.x.grad(), expected[0]) == 0);
  // weights[0]'s only edge is the careless op's: complete in B; weights[1] waits for W.
  REQUIRE(n.weights[0].has_grad());
  CHECK(fired == std::vector<int>{1, 0});
  w.run();
  CHECK(max_abs_diff(n.weights[0].grad(), expected[1]) == 0);
  CHECK(max_abs_diff(n.weights[1].grad(), expected[2]) <= 1e-6);  // its two parts in another order
  CHECK(fired == std::vector<int>{1, 1});
}
