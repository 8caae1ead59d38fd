// Parameter-free layers: activations, Flatten and Dropout.
#pragma once

#include "dtrain/layers/module.h"

namespace dtrain::nn {

class ReLU final : public Module {
 public:
  Variable forward(const Variable& x) override { return relu(x); }
  std::string describe() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  // GeluApproximation::Tanh: GPT-2's gelu_new (autograd/functions.h).
  explicit GELU(GeluApproximation approximate = GeluApproximation::None) : approximate_(approximate) {}
  Variable forward(const Variable& x) override { return gelu(x, approximate_); }
  std::string describe() const override {
    return approximate_ == GeluApproximation::Tanh ? "GELU(approximate=tanh)" : "GELU";
  }

 private:
  GeluApproximation approximate_;
};

class SiLU final : public Module {
 public:
  Variable forward(const Variable& x) override { return silu(x); }
  std::string describe() const override { return "SiLU"; }
};

class Tanh : public Module {
 public:
  Variable forward(const Variable& x) override { return tanh(x); }
  std::string describe() const override { return "Tanh"; }
};

class Sigmoid : public Module {
 public:
  Variable forward(const Variable& x) override { return sigmoid(x); }
  std::string describe() const override { return "Sigmoid"; }
};

// Flattens dims [start_dim, end_dim] (default: all but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(std::int64_t start_dim = 1, std::int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Variable forward(const Variable& x) override { return flatten(x, start_, end_); }
  std::string describe() const override { return "Flatten"; }

 private:
  std::int64_t start_, end_;
};

// Inverted dropout in training, identity in evaluation. Draws from the default generator.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Variable forward(const Variable& x) override { return is_training() ? dropout(x, p_) : x; }
  std::string describe() const override;

 private:
  double p_;
};

}  // namespace dtrain::nn
