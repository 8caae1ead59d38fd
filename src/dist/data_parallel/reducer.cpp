#include "dist/data_parallel/reducer.h"

#include "dtrain/core/trace.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <spdlog/spdlog.h>

namespace dtrain::dist {

std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<BucketParam>& params, std::size_t bucket_bytes) {
  std::vector<std::vector<std::size_t>> buckets;
  struct Open {
    std::vector<std::size_t> members;
    std::size_t bytes = 0;
  };
  std::map<DType, Open> open;
  for (std::size_t k = params.size(); k-- > 0;) {
    Open& bucket = open[params[k].dtype];
    bucket.members.push_back(k);
    bucket.bytes += params[k].bytes;
    if (bucket.bytes >= bucket_bytes) {
      buckets.push_back(std::move(bucket.members));
      bucket = Open{};
    }
  }
  for (auto& [dtype, bucket] : open) {
    if (!bucket.members.empty()) buckets.push_back(std::move(bucket.members));
  }
  // Indices descend along the walk, so "first in the walk" is "largest first index".
  std::sort(buckets.begin(), buckets.end(), [](const auto& a, const auto& b) { return a.front() > b.front(); });
  return buckets;
}

namespace {

// The given buckets as indices into `params`: every trained parameter in exactly one, one
// dtype per bucket.
std::vector<std::vector<std::size_t>> named_buckets(const std::vector<std::pair<std::string, Variable>>& params,
                                                    const std::vector<std::vector<std::string>>& names) {
  std::map<std::string, std::size_t> index;
  for (std::size_t k = 0; k < params.size(); ++k) index.emplace(params[k].first, k);
  std::vector<bool> placed(params.size(), false);
  std::vector<std::vector<std::size_t>> plan;
  for (const auto& bucket : names) {
    DTRAIN_CHECK(!bucket.empty(), "gradient buckets: bucket {} is empty", plan.size());
    plan.emplace_back();
    for (const std::string& name : bucket) {
      const auto it = index.find(name);
      DTRAIN_CHECK(it != index.end(), "gradient buckets: '{}' is not a trained parameter of the model", name);
      DTRAIN_CHECK(!placed[it->second], "gradient buckets: '{}' is in two buckets", name);
      const DType dtype = params[it->second].second.dtype();
      DTRAIN_CHECK(plan.back().empty() || dtype == params[plan.back().front()].second.dtype(),
                   "gradient buckets: '{}' is {}, unlike the rest of its bucket", name, dtype_name(dtype));
      placed[it->second] = true;
      plan.back().push_back(it->second);
    }
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    DTRAIN_CHECK(placed[k], "gradient buckets: the trained parameter '{}' is in none", params[k].first);
  }
  return plan;
}

}  // namespace

GradientReducer::GradientReducer(std::vector<std::pair<std::string, Variable>> params, GradientExchangePtr exchange,
                                 const ReducerOptions& options, const bool& sync)
    : exchange_(std::move(exchange)),
      communicate_(options.communicate),
      keep_buckets_(options.keep_buckets),
      sync_(sync) {
  std::vector<BucketParam> sizes;
  for (const auto& [name, p] : params) sizes.push_back({p.dtype(), p.data().nbytes()});
  const auto plan =
      options.buckets.empty() ? assign_buckets(sizes, options.bucket_bytes) : named_buckets(params, options.buckets);

  // Slots in the plan's order, so that a bucket's slots are contiguous in its buffer.
  slots_.reserve(params.size());
  std::vector<BucketLayout> layouts;
  for (std::size_t b = 0; b < plan.size(); ++b) {
    std::int64_t numel = 0;
    for (std::size_t k : plan[b]) numel += params[k].second.numel();
    const Variable& first = params[plan[b].front()].second;
    Bucket bucket;
    bucket.numel = numel;
    bucket.options = first.data().options();
    if (keep_buckets_) bucket.buffer = Tensor::zeros({numel}, bucket.options);
    bucket.slots = bucket.pending = plan[b].size();
    BucketLayout layout{.dtype = first.dtype(), .numel = numel, .members = {}};
    std::int64_t offset = 0;
    for (std::size_t k : plan[b]) {
      auto& [name, p] = params[k];
      layout.members.push_back({name, p.shape(), offset});
      Tensor view = keep_buckets_ ? bucket.buffer.narrow(0, offset, p.numel()).view(p.shape()) : Tensor();
      slots_.push_back(Slot{std::move(name), std::move(p), b, offset, std::move(view)});
      offset += slots_.back().param.numel();
    }
    buckets_.push_back(std::move(bucket));
    layouts.push_back(std::move(layout));
  }
  exchange_->plan(layouts);
  if (options.overlap) {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      slots_[i].param.register_grad_hook([this, i](Variable&) { on_grad_ready(i); });
    }
  }
}

GradientReducer::~GradientReducer() {
  for (auto& slot : slots_) slot.param.clear_grad_hooks();
  for (auto& bucket : buckets_) {
    if (!bucket.work) continue;
    try {
      bucket.work->wait();
    } catch (const std::exception& e) {
      spdlog::error("gradient reducer: an exchange ({}) failed while shutting down: {}", exchange_->name(), e.what());
    }
  }
}

void GradientReducer::on_grad_ready(std::size_t i) {
  if (!sync_) return;  // no_sync(): the gradient stays local and keeps accumulating
  Slot& slot = slots_[i];
  DTRAIN_CHECK(!slot.ready,
               "DataParallel: parameter '{}' got a second gradient before finish_gradient_sync(); call it after "
               "every backward, or accumulate inside no_sync()",
               slot.name);
  mark_ready(i);
}

// Copies the parameter's gradient (zero when it has none) into its slot, then launches
// whatever that completes.
Tensor GradientReducer::slot_view(Slot& slot) {
  if (keep_buckets_) return slot.view;
  Bucket& bucket = buckets_[slot.bucket];
  if (!bucket.buffer.defined()) bucket.buffer = Tensor::empty({bucket.numel}, bucket.options);  // every slot writes
  return bucket.buffer.narrow(0, slot.offset, slot.param.numel()).view(slot.param.shape());
}

void GradientReducer::mark_ready(std::size_t i) {
  Slot& slot = slots_[i];
  Tensor view = slot_view(slot);
  if (!slot.param.has_grad()) {
    view.zero_();
  } else if (const Tensor& g = slot.param.grad(); !(g.same_storage(view) && g.offset() == view.offset())) {
    view.copy_(g);  // unless the gradient already is the slot (a view kept from the last step)
  }
  if (!keep_buckets_) slot.param.zero_grad();  // the bucket holds it now
  slot.ready = true;
  --buckets_[slot.bucket].pending;
  launch_in_order();
}

// Every rank must start the same all-reduces in the same order, or the collectives
// would pair up wrongly; ready buckets wait for all earlier ones to be launched.
void GradientReducer::launch_in_order() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    // Transient buckets: at most two in flight, so that the gradients held stay near two buckets.
    if (!keep_buckets_ && next_launch_ >= 2) complete(buckets_[next_launch_ - 2]);
    Bucket& bucket = buckets_[next_launch_++];
    if (trace::recording()) trace::instant(fmt::format("bucket {} ready", next_launch_ - 1), "communication");
    if (communicate_) bucket.work = exchange_->start(next_launch_ - 1, bucket.buffer);
  }
}

void GradientReducer::complete(Bucket& bucket) {
  if (bucket.work) bucket.work->wait();
  bucket.work.reset();
  if (!keep_buckets_) bucket.buffer = Tensor();
}

void GradientReducer::finish() {
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].ready) mark_ready(i);
  }
  // What backward did not hide: the wait for the all-reduces still running.
  trace::Span wait("gradient all-reduce wait",
                   trace::Phase::Communication);  // tests/examples/check_trace.py looks for this name
  for (auto& bucket : buckets_) {
    complete(bucket);
    bucket.pending = bucket.slots;
  }
  for (auto& slot : slots_) {
    if (keep_buckets_) slot.param.set_grad(slot.view);
    slot.ready = false;
  }
  next_launch_ = 0;
}

}  // namespace dtrain::dist
