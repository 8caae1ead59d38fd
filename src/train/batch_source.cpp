#include "train/batch_source.h"

#include "dtrain/core/trace.h"

#include <algorithm>

namespace dtrain::train {

BatchSource::BatchSource(data::DataLoader& loader, Device device, int accumulate, dist::BatchDispenser* dispenser)
    : loader_(loader), device_(device), accumulate_(accumulate), dispenser_(dispenser) {}

void BatchSource::begin(std::int64_t first, std::int64_t end, std::int64_t queue) {
  end_ = end;
  trace::Span wait("data", trace::Phase::Data);
  if (!dispenser_) {
    if (it_) return;  // the epoch's pass goes on
    position_ = first;
    it_ = loader_.begin_at(std::min(loader_.num_batches(), first * accumulate_));
  } else {
    // The stretch's batches, claimed from the dispenser as the loader's threads need them.
    const std::int64_t batches = loader_.num_batches();
    const std::int64_t first_batch = std::min(batches, first * accumulate_);
    const std::int64_t count = std::min(batches, end * accumulate_) - first_batch;
    next_.reset();
    it_.reset();
    if (count <= 0) return;
    it_ = loader_.begin_claimed([dispenser = dispenser_, queue, first_batch, count]() -> std::optional<std::int64_t> {
      trace::Span claiming("claim batch", trace::Phase::Communication);
      const std::optional<std::int64_t> c = dispenser->claim_batch(queue, count);
      if (!c) return std::nullopt;
      return first_batch + *c;
    });
  }
  stage_next();
}

void BatchSource::stage_next() {
  next_.reset();
  if (*it_ == loader_.end()) return;
  next_.emplace(**it_, device_);  // queued before this update's step
  next_number_ = it_->batch_number();
  ++*it_;
}

std::optional<UpdateBatches> BatchSource::next() {
  if (!next_ || (!dispenser_ && position_ >= end_)) return std::nullopt;
  UpdateBatches update;
  update.position = dispenser_ ? next_number_ / accumulate_ : position_++;
  while (next_ && static_cast<int>(update.micro.size()) < accumulate_) {
    update.micro.push_back(std::move(*next_));
    update.numbers.push_back(next_number_);
    trace::Span wait("data", trace::Phase::Data);
    stage_next();
  }
  return update;
}

void BatchSource::finish() {
  next_.reset();
  it_.reset();
}

}  // namespace dtrain::train
