// The split backward (autograd/split_backward.h) through the layers with weights, as a
// zero-bubble pipeline stage runs them: Linear, Conv2d, BatchNorm2d (with its fused ReLU
// under Sequential), Embedding and LayerNorm. After the input pass the input's gradient
// equals backward()'s and no weight has one; after the weight pass every weight's gradient
// equals backward()'s, bit for bit.
#include "dtrain/autograd/split_backward.h"
#include "dtrain/layers/activation.h"
#include "dtrain/layers/conv.h"
#include "dtrain/layers/embedding.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/normalization.h"
#include "dtrain/layers/pooling.h"
#include "dtrain/layers/sequential.h"
#include "support/test_support.h"

#include <functional>

using namespace dtrain;

namespace {

// layer_norm(linear(x)) times rows 1, 3, 3 of an embedding table.
class LookupBeside final : public nn::Module {
 public:
  LookupBeside() {
    register_module("linear", linear_);
    register_module("norm", norm_);
    register_module("table", table_);
  }
  Variable forward(const Variable& x) override {
    const Variable rows = (*table_)(Variable(Tensor::from_vector<std::int64_t>({1, 3, 3}, {3})));
    return mul((*norm_)((*linear_)(x)), rows);
  }
  std::string describe() const override { return "LookupBeside"; }

 private:
  std::shared_ptr<nn::Linear> linear_ = std::make_shared<nn::Linear>(5, 4);
  std::shared_ptr<nn::LayerNorm> norm_ = std::make_shared<nn::LayerNorm>(Shape{4});
  std::shared_ptr<nn::Embedding> table_ = std::make_shared<nn::Embedding>(7, 4);
};

struct Case {
  std::string name;
  std::function<nn::ModulePtr()> model;  // the same initial weights at every call
  std::function<Variable(nn::Module&, const Variable& x)> loss;
  Shape input;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all{
      {"Linear, ReLU, Linear",
       [] {
         manual_seed(3);
         auto s = std::make_shared<nn::Sequential>();
         s->push_back(std::make_shared<nn::Linear>(6, 8));
         s->push_back(std::make_shared<nn::ReLU>());
         s->push_back(std::make_shared<nn::Linear>(8, 3));
         return s;
       },
       [](nn::Module& m, const Variable& x) { return sum(mul(m(x), m(x))); }, Shape{4, 6}},
      {"Conv2d, BatchNorm2d, ReLU, MaxPool2d",
       [] {
         manual_seed(4);
         auto s = std::make_shared<nn::Sequential>();
         s->push_back(std::make_shared<nn::Conv2d>(3, 4, 3, nn::Conv2dOptions{.padding = 1}));
         s->push_back(std::make_shared<nn::BatchNorm2d>(4));
         s->push_back(std::make_shared<nn::ReLU>());
         s->push_back(std::make_shared<nn::MaxPool2d>(2));
         return s;
       },
       [](nn::Module& m, const Variable& x) { return sum(mul(m(x), 0.25)); }, Shape{2, 3, 6, 6}},
      {"Embedding beside a Linear, LayerNorm",
       [] {
         manual_seed(5);
         return std::make_shared<LookupBeside>();
       },
       [](nn::Module& m, const Variable& x) { return sum(m(x)); }, Shape{3, 5}},
  };
  return all;
}

}  // namespace

TEST_CASE("The layers' weight gradients wait for the split backward's weight pass, and equal backward()'s",
          "[layers][cpu]") {
  for (const Case& c : cases()) {
    INFO(c.name);
    const Tensor input = test::random_tensor(c.input, 9);
    // backward() whole.
    nn::ModulePtr plain = c.model();
    Variable x0(input.clone(), true);
    c.loss(*plain, x0).backward();
    // Split.
    nn::ModulePtr split = c.model();
    Variable x1(input.clone(), true);
    Variable loss = c.loss(*split, x1);
    DeferredWeightGradients w = backward_inputs(loss, Tensor::ones({}), split->parameters());
    CHECK(max_abs_diff(x1.grad(), x0.grad()) == 0);
    for (const auto& [name, p] : split->named_parameters()) {
      INFO(name);
      CHECK_FALSE(p.has_grad());
    }
    w.run();
    const auto expected = plain->named_parameters();
    const auto got = split->named_parameters();
    REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO(got[i].first);
      REQUIRE(got[i].second.has_grad());
      CHECK(max_abs_diff(got[i].second.grad(), expected[i].second.grad()) == 0);
    }
  }
}
