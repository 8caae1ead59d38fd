#include "dtrain/optim/optimizer.h"

#include "dtrain/core/error.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>
#include <unordered_set>

namespace dtrain::optim {

namespace {

void check_lr(double lr) {
  DTRAIN_CHECK(std::isfinite(lr) && lr >= 0, "optimizer: lr must be a finite number >= 0, got {}", lr);
}

// "<buffer>.<param index>" -> (buffer, index); nullopt when the key has another form.
std::optional<std::pair<std::string_view, std::size_t>> split_buffer_key(std::string_view key) {
  const std::size_t dot = key.rfind('.');
  if (dot == std::string_view::npos || dot + 1 == key.size()) return std::nullopt;
  std::size_t index = 0;
  const char* last = key.data() + key.size();
  auto [end, error] = std::from_chars(key.data() + dot + 1, last, index);
  if (error != std::errc{} || end != last) return std::nullopt;
  return std::pair{key.substr(0, dot), index};
}

// The value of a one-element checkpoint entry.
double scalar_entry(const std::string& key, const Tensor& t) {
  DTRAIN_CHECK(t.numel() == 1, "load_state: '{}' must hold one value, got shape {}", key, shape_str(t.shape()));
  return t.item();
}

}  // namespace

Optimizer::Optimizer(std::vector<Variable> params, double lr) : params_(std::move(params)), lr_(lr) {
  check_lr(lr);
  DTRAIN_CHECK(!params_.empty(), "optimizer: the parameter list is empty");
  std::unordered_set<const void*> seen;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Variable& p = params_[i];
    DTRAIN_CHECK(p.defined(), "optimizer: parameter {} is undefined", i);
    DTRAIN_CHECK(is_floating(p.dtype()), "optimizer: parameter {} has dtype {}; only floating parameters train", i,
                 dtype_name(p.dtype()));
    // A repeated parameter would be updated twice per step.
    DTRAIN_CHECK(seen.insert(p.id()).second, "optimizer: parameter {} appears more than once", i);
  }
  updates_.assign(params_.size(), 0);
}

Optimizer::~Optimizer() = default;

void Optimizer::zero_grad() {
  for (Variable& p : params_) p.zero_grad();
}

void Optimizer::set_lr(double lr) {
  check_lr(lr);
  lr_ = lr;
}

std::size_t Optimizer::add_buffer(std::string name) {
  buffers_.push_back({std::move(name), std::vector<Tensor>(params_.size())});
  return buffers_.size() - 1;
}

NamedTensors Optimizer::state() const {
  NamedTensors out = state_view();
  for (auto& [key, t] : out) {
    if (key != "lr" && key != "steps" && key != "updates") t = t.clone();
  }
  return out;
}

NamedTensors Optimizer::state_view() const {
  NamedTensors out;
  out.emplace_back("lr", Tensor::scalar(lr_, {DType::f64}));
  out.emplace_back("steps", Tensor::scalar(static_cast<double>(steps_), {DType::i64}));
  out.emplace_back("updates", Tensor::from_vector(updates_, {static_cast<std::int64_t>(updates_.size())}));
  for (const Buffer& b : buffers_) {
    for (std::size_t i = 0; i < b.slots.size(); ++i) {
      if (b.slots[i].defined()) out.emplace_back(b.name + "." + std::to_string(i), b.slots[i]);
    }
  }
  return out;
}

void Optimizer::load_state(const NamedTensors& state) {
  // Everything is read into fresh values first, so that a bad checkpoint changes nothing.
  std::optional<double> lr;
  std::optional<std::int64_t> steps;
  std::optional<std::vector<std::int64_t>> updates;
  std::vector<std::vector<Tensor>> slots(buffers_.size(), std::vector<Tensor>(params_.size()));
  std::unordered_set<std::string> seen;
  for (const auto& [key, t] : state) {
    DTRAIN_CHECK(seen.insert(key).second, "load_state: entry '{}' appears twice", key);
    DTRAIN_CHECK(t.defined(), "load_state: entry '{}' is an undefined tensor", key);
    if (key == "lr") {
      lr = scalar_entry(key, t);
      check_lr(*lr);
    } else if (key == "steps") {
      const double value = scalar_entry(key, t);
      DTRAIN_CHECK(value >= 0 && value < 0x1p63, "load_state: 'steps' must be a count >= 0, got {}", value);
      steps = static_cast<std::int64_t>(value);
    } else if (key == "updates") {
      DTRAIN_CHECK(t.dim() == 1 && t.numel() == static_cast<std::int64_t>(params_.size()),
                   "load_state: 'updates' has shape {}, expected [{}] (one count per parameter)",
                   shape_str(t.shape()), params_.size());
      updates = t.to_vector<std::int64_t>();
      for (std::int64_t n : *updates) DTRAIN_CHECK(n >= 0, "load_state: 'updates' holds a negative count {}", n);
    } else {
      const auto parsed = split_buffer_key(key);
      std::size_t id = buffers_.size();
      for (std::size_t b = 0; parsed && b < buffers_.size(); ++b) {
        if (buffers_[b].name == parsed->first) id = b;
      }
      DTRAIN_CHECK(id < buffers_.size(), "load_state: unknown entry '{}' for this optimizer", key);
      const std::size_t index = parsed->second;
      DTRAIN_CHECK(index < params_.size(), "load_state: entry '{}' names parameter {}, but there are {}", key, index,
                   params_.size());
      const Tensor& p = params_[index].data();
      DTRAIN_CHECK(t.shape() == p.shape(), "load_state: entry '{}' has shape {}, parameter {} has shape {}", key,
                   shape_str(t.shape()), index, shape_str(p.shape()));
      Tensor copy = t.to(p.dtype()).to(p.device());
      slots[id][index] = copy.same_storage(t) ? copy.clone() : copy;
    }
  }
  DTRAIN_CHECK(lr && steps && updates, "load_state: the state lacks '{}'", !lr ? "lr" : !steps ? "steps" : "updates");

  lr_ = *lr;
  steps_ = *steps;
  updates_ = std::move(*updates);
  for (std::size_t b = 0; b < buffers_.size(); ++b) buffers_[b].slots = std::move(slots[b]);
}

}  // namespace dtrain::optim
