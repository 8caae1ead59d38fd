#include "train/state_snapshot.h"

#include "train/range_key.h"

#include "dtrain/core/error.h"
#include "dtrain/tensor/ops.h"

#include <map>
#include <set>
#include <unordered_map>

namespace dtrain::train {

namespace {

// `from` copied into `into`'s tensors where name, shape and dtype match (no new memory for
// a snapshot like the last), into fresh host tensors elsewhere.
void copy_into(optim::NamedTensors& into, const optim::NamedTensors& from) {
  optim::NamedTensors out;
  out.reserve(from.size());
  for (std::size_t i = 0; i < from.size(); ++i) {
    const auto& [name, t] = from[i];
    Tensor target;
    if (i < into.size() && into[i].first == name && into[i].second.shape() == t.shape() &&
        into[i].second.dtype() == t.dtype()) {
      target = std::move(into[i].second);
    } else {
      target = Tensor::empty(t.shape(), {t.dtype()});
    }
    target.copy_(t.device().is_cpu() ? t : t.to(Device::cpu()));
    out.emplace_back(name, std::move(target));
  }
  into = std::move(out);
}

}  // namespace

void StateSnapshot::take(dist::Strategy& strategy, const dist::CheckpointPlan& plan,
                         const optim::Optimizer& optimizer) {
  // Every rank its own copy, whichever rank a checkpoint lets write it.
  optim::NamedTensors model = plan.model_share ? plan.model_share() : strategy.module().state_dict();
  if (plan.model_share) {
    // A share may leave the buffers to one rank (a checkpoint joins every rank's files);
    // a snapshot is this rank's alone, so it takes its own.
    std::set<std::string> named;
    for (const auto& [name, t] : model) named.insert(name);
    for (const auto& [name, b] : strategy.module().named_buffers()) {
      if (!named.count(name)) model.emplace_back(name, b);
    }
  }
  copy_into(model_, model);
  if (plan.saves_optimizer || plan.optimizer_share) {
    copy_into(optimizer_, plan.optimizer_share ? plan.optimizer_share(optimizer) : optimizer.state_view());
  }
  if (plan.rank_state) copy_into(rank_state_, plan.rank_state());
  taken_ = true;
}

void StateSnapshot::restore(dist::Strategy& strategy, const dist::CheckpointPlan& plan,
                            optim::Optimizer& optimizer) const {
  DTRAIN_CHECK(taken_, "rollback: no snapshot to restore");
  nn::Module& module = strategy.module();
  if (plan.load_model_share) {
    plan.load_model_share(spread_ranges(model_, module));
  } else {
    module.load_state_dict(model_);
  }
  if (plan.load_optimizer_share) {
    plan.load_optimizer_share(optimizer, spread_ranges(optimizer_, module));
  } else if (plan.saves_optimizer) {
    optimizer.load_state(optimizer_);
  }
  if (plan.load_rank_state) plan.load_rank_state(rank_state_);
}

optim::NamedTensors spread_ranges(const optim::NamedTensors& ranges, const nn::Module& module) {
  std::unordered_map<std::string, Shape> shapes;
  for (const auto& [name, p] : module.named_parameters()) shapes.emplace(name, p.shape());
  std::map<std::string, Tensor> spread;  // "<parameter><suffix>" -> flat, zeros where no range lies
  std::map<std::string, std::string> parameter_of;
  optim::NamedTensors out;
  for (const auto& [key, t] : ranges) {
    const std::optional<RangeKey> r = parse_range_key(key, shapes);
    if (!r) {
      out.emplace_back(key, t);
      continue;
    }
    const std::string name = r->parameter + r->suffix;
    const std::int64_t begin = r->begin, end = r->end;
    const Shape& shape = shapes.at(r->parameter);
    std::int64_t numel = 1;
    for (std::int64_t d : shape) numel *= d;
    DTRAIN_CHECK(begin >= 0 && begin <= end && end <= numel && t.numel() == end - begin,
                 "rollback: '{}' holds {} elements for a range of a parameter of {}", key, t.numel(), numel);
    auto it = spread.find(name);
    if (it == spread.end()) {
      it = spread.emplace(name, Tensor::zeros({numel}, {t.dtype()})).first;
      parameter_of.emplace(name, r->parameter);
    }
    it->second.narrow(0, begin, end - begin).copy_(t.reshape({end - begin}));
  }
  for (auto& [name, flat] : spread) out.emplace_back(name, flat.reshape(shapes.at(parameter_of.at(name))));
  return out;
}

}  // namespace dtrain::train
