#include "dtrain/autograd/autocast.h"
#include "dtrain/layers/layers.h"
#include "support/test_support.h"

#include <cmath>
#include <optional>
#include <vector>

using namespace dtrain;
using namespace dtrain::nn;

TEST_CASE("parameters are named recursively in registration order", "[layers][cpu]") {
  auto model = mlp(6, {5}, 3);
  auto named = model->named_parameters();
  REQUIRE(named.size() == 4);
  CHECK(named[0].first == "1.weight");
  CHECK(named[1].first == "1.bias");
  CHECK(named[2].first == "3.weight");
  CHECK(named[3].first == "3.bias");
  CHECK(model->num_parameters() == 6 * 5 + 5 + 5 * 3 + 3);
  CHECK(model->summary().find("Linear(6, 5)") != std::string::npos);
}

TEST_CASE("state_dict round-trips and load_state_dict explains mismatches", "[layers][cpu]") {
  manual_seed(1);
  auto a = lenet_cnn();
  manual_seed(2);
  auto b = lenet_cnn();
  a->load_state_dict(b->state_dict());
  for (std::size_t i = 0; i < a->state_dict().size(); ++i) {
    CHECK(max_abs_diff(a->state_dict()[i].second, b->state_dict()[i].second) == 0);
  }
  StateDict missing = b->state_dict();
  missing.pop_back();
  CHECK_THROWS_WITH(a->load_state_dict(missing), Catch::Contains("missing"));
  StateDict extra = b->state_dict();
  extra.emplace_back("bogus", Tensor::zeros({1}));
  CHECK_THROWS_WITH(a->load_state_dict(extra), Catch::Contains("bogus"));
  StateDict wrong = b->state_dict();
  wrong[0].second = Tensor::zeros({1, 2});
  CHECK_THROWS_WITH(a->load_state_dict(wrong), Catch::Contains("[1, 2]"));
}

TEST_CASE("Linear computes x W^T + b", "[layers][cpu]") {
  Linear layer(3, 2);
  Tensor w = layer.weight.data();
  Tensor b = layer.bias.data();
  Tensor x = test::random_tensor({4, 3}, 3);
  Tensor y = layer(Variable(x)).data();
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> expected;
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 2; ++o) {
      double s = bv[o];
      for (int k = 0; k < 3; ++k) s += xv[i * 3 + k] * wv[o * 3 + k];
      expected.push_back(s);
    }
  test::require_close(y, Tensor::from_vector(expected, {4, 2}).to(DType::f32), 1e-5, 1e-6);
  // PyTorch's default init bound 1/sqrt(in).
  double bound = 1 / std::sqrt(3.0);
  CHECK(max(abs(w)).item() <= bound);
  CHECK_THROWS_WITH(layer(Variable(Tensor::zeros({4, 5}))), Catch::Contains("[4, 5]"));
}

TEST_CASE("BatchNorm2d: batch statistics in training, running statistics in eval", "[layers][cpu]") {
  BatchNorm2d bn(2, {.eps = 1e-5, .momentum = 0.5});
  Tensor x = test::random_tensor({4, 2, 3, 3}, 4, DType::f32, 0, 4);
  Tensor y = bn(Variable(x)).data();
  // Each channel of the output has mean 0 and (biased) variance 1.
  Tensor m = mean(y, {0, 2, 3});
  Tensor v = mean(square(y), {0, 2, 3});
  test::require_close(m, Tensor::zeros({2}), 0, 1e-5);
  test::require_close(v, Tensor::ones({2}), 1e-3, 1e-3);
  // running_mean = 0.5 * 0 + 0.5 * batch mean; running_var uses the unbiased variance.
  Tensor batch_mean = mean(x, {0, 2, 3});
  test::require_close(bn.running_mean, mul(batch_mean, 0.5), 1e-5, 1e-6);
  Tensor centered = sub(x, batch_mean.reshape({1, 2, 1, 1}));
  Tensor unbiased = div(sum(square(centered), {0, 2, 3}), 35.0);
  test::require_close(bn.running_var, add(mul(unbiased, 0.5), 0.5), 1e-4, 1e-5);
  CHECK(bn.num_batches_tracked.item() == 1);

  bn.eval();
  Tensor ye = bn(Variable(x)).data();
  Tensor expected =
      div(sub(x, bn.running_mean.reshape({1, 2, 1, 1})), sqrt(add(bn.running_var, 1e-5)).reshape({1, 2, 1, 1}));
  test::require_close(ye, expected, 1e-4, 1e-5);
  CHECK_THROWS_WITH(bn(Variable(Tensor::zeros({4, 2}))), Catch::Contains("4-d"));
  CHECK_THROWS_WITH(bn(Variable(Tensor::zeros({4, 3, 2, 2}))), Catch::Contains("3 channels"));
}

TEST_CASE("Sequential runs BatchNorm then ReLU fused: the same outputs, gradients and statistics", "[layers][cpu]") {
  const Tensor x = test::random_tensor({4, 3, 5, 5}, 41), g = test::random_tensor({4, 3, 5, 5}, 42);
  auto bn = std::make_shared<BatchNorm2d>(3);
  auto apart = std::make_shared<BatchNorm2d>(3);
  Sequential fused{bn, std::make_shared<ReLU>()};
  for (bool training : {true, false}) {
    INFO("training " << training);
    fused.train(training);
    apart->train(training);
    Variable in_fused(x, true), in_apart(x, true);
    Variable y_fused = fused(in_fused), y_apart = relu((*apart)(in_apart));
    test::require_close(y_fused.data(), y_apart.data(), 0, 0);
    y_fused.backward(g);
    y_apart.backward(g);
    // The backward's sums may add in another order (tests/tensor/test_batch_norm.cpp).
    test::require_close(in_fused.grad(), in_apart.grad(), 1e-5, 1e-6);
    test::require_close(bn->weight.grad(), apart->weight.grad(), 1e-5, 1e-6);
    test::require_close(bn->bias.grad(), apart->bias.grad(), 1e-5, 1e-6);
    test::require_close(bn->running_mean, apart->running_mean, 0, 0);
    test::require_close(bn->running_var, apart->running_var, 0, 0);
  }
}

TEST_CASE("Linear::forward_relu, and Sequential's Linear then ReLU: the same outputs and gradients as apart",
          "[layers][cpu]") {
  for (const bool with_bias : {true, false}) {
    for (const bool autocast : {false, true}) {
      for (const Shape& shape : {Shape{5}, Shape{6, 5}, Shape{2, 3, 5}}) {
        INFO("bias " << with_bias << ", bf16 autocast " << autocast << ", input " << shape_str(shape));
        AutocastGuard guard(DType::bf16, autocast);
        auto fused = std::make_shared<Linear>(5, 16, with_bias), apart = std::make_shared<Linear>(5, 16, with_bias);
        apart->weight.set_data(fused->weight.data().clone());
        if (with_bias) apart->bias.set_data(fused->bias.data().clone());
        const Tensor x = test::random_tensor(shape, 45);
        Variable in_apart(x, true);
        Variable y_apart = relu((*apart)(in_apart));
        const Tensor g = test::random_tensor(y_apart.shape(), 46);
        y_apart.backward(g);
        // The ReLU zeroes some outputs and passes others, so its mask matters.
        const double zeros = sum(eq(y_apart.data(), Tensor::scalar(0))).item();
        REQUIRE(zeros > 0);
        REQUIRE(zeros < static_cast<double>(y_apart.numel()));

        const auto check = [&](const Variable& in, const Variable& y) {
          test::require_close(y.data(), y_apart.data(), 0, 0);
          test::require_close(in.grad(), in_apart.grad(), 0, 0);
          test::require_close(fused->weight.grad(), apart->weight.grad(), 0, 0);
          // The bias gradient's sum over rows may add in another order.
          if (with_bias) test::require_close(fused->bias.grad(), apart->bias.grad(), 1e-6, 1e-7);
          fused->zero_grad();
        };
        Variable in_direct(x, true);
        Variable y_direct = fused->forward_relu(in_direct);
        y_direct.backward(g);
        check(in_direct, y_direct);

        // Sequential takes the fused path: the bias's gradient arrives from add_relu,
        // before linear's backward gives the weight its own (apart, the weight's comes first).
        std::optional<bool> weight_done_first;
        if (with_bias) fused->bias.register_grad_hook([&](Variable&) { weight_done_first = fused->weight.has_grad(); });
        Sequential sequential{fused, std::make_shared<ReLU>()};
        Variable in_sequential(x, true);
        Variable y_sequential = sequential(in_sequential);
        y_sequential.backward(g);
        check(in_sequential, y_sequential);
        if (with_bias) CHECK(weight_done_first == false);
      }
    }
  }
}

TEST_CASE("Sequential runs ReLU then MaxPool2d as pool then ReLU: the same outputs and gradients", "[layers][cpu]") {
  // Windows of all-negative values, of ties, of zeros of both signs, with NaN, and padding.
  std::vector<float> values = test::random_tensor({2, 16, 6, 7}, 43).to_vector<float>();
  for (std::size_t i = 0; i < values.size(); i += 5) values[i] = -std::abs(values[i]);
  for (std::size_t i = 1; i < values.size(); i += 11) values[i] = values[i - 1];
  for (std::size_t i = 2; i < values.size(); i += 13) values[i] = i % 2 ? 0.0f : -0.0f;
  values[17] = std::nanf("");
  const Tensor plain = Tensor::from_vector(values, {2, 16, 6, 7});
  for (const bool blocked : {false, true}) {
    for (const std::int64_t padding : {0, 1}) {
      INFO("blocked " << blocked << ", padding " << padding);
      test::CpuLayoutSwitch layout(blocked);
      // The values as they are (zeros of both signs included), or handed on in the blocked
      // layout by a 1x1 identity convolution (whose sums make every zero +0).
      const auto input = [&] {
        if (!blocked) return plain.clone();
        Tensor eye = Tensor::zeros({16, 16, 1, 1});
        for (std::int64_t c = 0; c < 16; ++c) eye.data<float>()[c * 16 + c] = 1;
        return conv2d(plain, eye, Tensor(), Conv2dParams{});
      };
      if (blocked && input().storage()->layout() == nullptr) {
        test::skip_test_case(
            "oneDNN picks no blocked layout for this convolution on this CPU: the blocked "
            "input is not checked");
        continue;
      }
      auto pool = std::make_shared<MaxPool2d>(3, 2, padding);
      Sequential fused{std::make_shared<ReLU>(), pool};
      Variable in_fused(input(), true), in_apart(input(), true);
      Variable y_fused = fused(in_fused), y_apart = (*pool)(relu(in_apart));
      const std::vector<float> a = y_fused.data().to_vector<float>(), b = y_apart.data().to_vector<float>();
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        INFO("output " << i << ": " << a[i] << " vs " << b[i]);
        CHECK(((std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i]));  // 0 == -0: a zero's sign may differ
      }
      const Tensor g = test::random_tensor(y_fused.shape(), 44);
      y_fused.backward(g);
      y_apart.backward(g);
      test::require_close(in_fused.grad(), in_apart.grad(), 0, 0);
    }
  }
}

TEST_CASE("Dropout is identity in eval and zeroes about p in training", "[layers][cpu]") {
  Dropout drop(0.25);
  Tensor x = Tensor::ones({100, 100});
  Tensor y = drop(Variable(x)).data();
  double zeros = sum(eq(y, Tensor::scalar(0))).item();
  CHECK(zeros / 10000 == Approx(0.25).margin(0.02));
  CHECK(sum(y).item() / 10000 == Approx(1).margin(0.03));  // inverted scaling keeps the mean
  drop.eval();
  CHECK(max_abs_diff(drop(Variable(x)).data(), x) == 0);
}

TEST_CASE("Embedding looks up rows and scatters gradients back", "[layers][cpu]") {
  Embedding emb(5, 3);
  Tensor idx = Tensor::from_vector<std::int64_t>({4, 0, 4}, {3});
  Variable out = emb(Variable(idx));
  REQUIRE(out.shape() == Shape{3, 3});
  test::require_close(out.data().select(0, 0), emb.weight.data().select(0, 4));
  sum(out).backward();
  auto g = emb.weight.grad().to_vector<float>();
  CHECK(g[4 * 3] == 2);  // row 4 used twice
  CHECK(g[0] == 1);
  CHECK(g[3] == 0);
}

TEST_CASE("models produce the expected output shapes", "[layers][cpu]") {
  CHECK(mlp(784, {512, 512}, 10)->forward(Variable(Tensor::zeros({2, 1, 28, 28}))).shape() == Shape{2, 10});
  CHECK(lenet_cnn()->forward(Variable(Tensor::zeros({2, 1, 28, 28}))).shape() == Shape{2, 10});
  auto r18 = resnet(18, 10, ResNetStem::Cifar);
  CHECK(r18->num_parameters() == 11173962);  // torchvision resnet18 with a 10-class head and 3x3 stem
  CHECK(r18->forward(Variable(Tensor::zeros({2, 3, 32, 32}))).shape() == Shape{2, 10});
  CHECK(resnet(50, 1000)->num_parameters() == 25557032);  // torchvision resnet50
  CHECK_THROWS_WITH(resnet(20), Catch::Contains("depth 20"));
}

TEST_CASE("train/eval propagates to children", "[layers][cpu]") {
  auto model = resnet(18, 10, ResNetStem::Cifar);
  model->eval();
  for (const auto& [name, child] : model->children()) CHECK_FALSE(child->is_training());
  model->train();
  CHECK((*model)[1]->is_training());
}

namespace {

// Records which modules' hooks ran, in order, and scales the outputs by `factor`.
class RecordingHooks final : public Module::ForwardHooks {
 public:
  RecordingHooks(std::vector<std::string>& log, double factor) : log_(log), factor_(factor) {}
  void before(Module& m) override { log_.push_back("before " + m.describe()); }
  Variable after(Module& m, Variable out) override {
    log_.push_back("after " + m.describe());
    const double f = factor_;
    return Variable(mul(out.data(), Tensor::scalar(f)), {out},
                    [f](std::vector<Variable>& in, const Tensor& g) { in[0].add_grad(mul(g, Tensor::scalar(f))); });
  }

 private:
  std::vector<std::string>& log_;
  double factor_;
};

}  // namespace

TEST_CASE("forward hooks run around operator() and a Sequential's fused layers", "[layers][cpu]") {
  manual_seed(3);
  // Linear then ReLU, and BatchNorm then ReLU, are fused by Sequential: the hooks still run.
  auto model = std::make_shared<Sequential>(
      std::vector<ModulePtr>{std::make_shared<Linear>(4, 3), std::make_shared<ReLU>(), std::make_shared<BatchNorm1d>(3),
                             std::make_shared<ReLU>(), std::make_shared<Linear>(3, 2)});
  Tensor x = Tensor::ones({5, 4});
  std::vector<std::string> log;
  auto hooks = std::make_shared<RecordingHooks>(log, 1.0);
  for (const auto& [name, child] : model->children()) {
    if (!child->own_parameters().empty()) child->add_forward_hooks(hooks);
  }
  (void)(*model)(Variable(x));
  CHECK(log == std::vector<std::string>{"before Linear(4, 3)", "after Linear(4, 3)", "before BatchNorm1d(3)",
                                        "after BatchNorm1d(3)", "before Linear(3, 2)", "after Linear(3, 2)"});
  // forward() called directly runs without them; removed hooks run no more.
  log.clear();
  (void)model->children().front().second->forward(Variable(x));
  for (const auto& [name, child] : model->children()) child->remove_forward_hooks(hooks.get());
  (void)(*model)(Variable(x));
  CHECK(log.empty());
}

TEST_CASE("what a forward hook's after() returns is the module's output, backward included", "[layers][cpu]") {
  manual_seed(4);
  auto layer = std::make_shared<Linear>(4, 3);
  Tensor x = Tensor::ones({2, 4});
  Variable plain = (*layer)(Variable(x));
  sum(plain).backward();
  const Tensor plain_grad = layer->weight.grad().clone();
  layer->zero_grad();
  std::vector<std::string> log;
  layer->add_forward_hooks(std::make_shared<RecordingHooks>(log, 3.0));
  Variable tripled = (*layer)(Variable(x));
  sum(tripled).backward();
  CHECK(max_abs_diff(tripled.data(), mul(plain.data(), Tensor::scalar(3))) < 1e-5);
  CHECK(max_abs_diff(layer->weight.grad(), mul(plain_grad, Tensor::scalar(3))) < 1e-5);
}

namespace {
// Doubles the module's input, and logs its name.
class DoublingInput final : public Module::ForwardHooks {
 public:
  DoublingInput(std::vector<std::string>& log, std::string name) : log_(log), name_(std::move(name)) {}
  void before(Module&) override { log_.push_back("before " + name_); }
  Variable input(Module&, Variable x) override { return mul(x, 2.0); }
  bool transforms_input() const override { return true; }
  Variable after(Module&, Variable y) override {
    log_.push_back("after " + name_);
    return y;
  }

 private:
  std::vector<std::string>& log_;
  std::string name_;
};
}  // namespace

TEST_CASE("several hook sets nest, and an input transform keeps Sequential from fusing", "[layers][cpu]") {
  manual_seed(5);
  auto first = std::make_shared<Linear>(4, 3);
  auto model = std::make_shared<Sequential>(std::vector<ModulePtr>{first, std::make_shared<ReLU>()});
  Tensor x = Tensor::ones({2, 4});
  const Tensor plain = (*model)(Variable(x)).data().clone();
  std::vector<std::string> log;
  auto a = std::make_shared<DoublingInput>(log, "a");
  auto b = std::make_shared<DoublingInput>(log, "b");
  first->add_forward_hooks(a);
  first->add_forward_hooks(b);
  CHECK(first->transforms_input());
  // The Linear reads 4x its input (both transforms ran, not the fused Linear + ReLU).
  const Tensor hooked = (*model)(Variable(x)).data();
  const Tensor expected = relu((*first).forward(Variable(mul(x, 4.0)))).data();
  CHECK(max_abs_diff(hooked, expected) < 1e-6);
  CHECK(max_abs_diff(hooked, plain) > 1e-3);
  CHECK(log == std::vector<std::string>{"before a", "before b", "after b", "after a"});
  first->remove_forward_hooks(a.get());
  first->remove_forward_hooks(b.get());
  CHECK(!first->transforms_input());
  CHECK(max_abs_diff((*model)(Variable(x)).data(), plain) < 1e-6);
}
