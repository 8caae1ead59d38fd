#include "dtrain/tensor/storage.h"

#include "tensor/backend.h"

namespace dtrain {
namespace {
void* allocate(std::size_t nbytes, Device device, bool pinned) {
  if (!pinned) return detail::backend(device).allocate(nbytes);
  DTRAIN_CHECK(device.is_cpu(), "pinned memory is host memory: expected the CPU, got {}", device.str());
  return detail::pinned_allocate(nbytes);
}
}  // namespace

Storage::Storage(std::size_t nbytes, Device device, bool pinned)
    : data_(allocate(nbytes, device, pinned)), nbytes_(nbytes), device_(device), pinned_(pinned) {}

Storage::~Storage() {
  if (data_ == nullptr) return;  // still held in another layout, which frees itself
  if (pinned_) detail::pinned_deallocate(data_, nbytes_);
  else detail::backend(device_).deallocate(data_, nbytes_);
}

std::shared_ptr<const StorageLayout> Storage::layout() const {
  std::lock_guard lock(layout_mutex_);
  return layout_;
}

void Storage::replace_with_layout(std::shared_ptr<const StorageLayout> layout) {
  DTRAIN_CHECK(device_.is_cpu() && !pinned_ && layout != nullptr,
               "Storage::replace_with_layout: for unpinned CPU storage and a layout only");
  std::lock_guard lock(layout_mutex_);
  if (data_ != nullptr) detail::backend(device_).deallocate(data_, nbytes_);
  data_ = nullptr;
  layout_ = std::move(layout);
  deferred_.store(true, std::memory_order_release);
}

void Storage::release(std::string why) {
  DTRAIN_CHECK(!pinned_, "Storage::release: not for pinned memory");
  std::lock_guard lock(layout_mutex_);
  if (data_ != nullptr) detail::backend(device_).deallocate(data_, nbytes_);
  data_ = nullptr;
  layout_.reset();
  released_why_ = why.empty() ? "this storage's bytes were released" : std::move(why);
  deferred_.store(true, std::memory_order_release);
}

void Storage::reallocate() {
  std::lock_guard lock(layout_mutex_);
  if (released_why_.empty()) return;
  data_ = allocate(nbytes_, device_, false);
  released_why_.clear();
  deferred_.store(false, std::memory_order_release);
}

bool Storage::released() const {
  std::lock_guard lock(layout_mutex_);
  return !released_why_.empty();
}

void Storage::materialize() const {
  std::lock_guard lock(layout_mutex_);
  if (!deferred_.load(std::memory_order_relaxed)) return;  // another thread got here first
  DTRAIN_CHECK(released_why_.empty(), "{}", released_why_);
  data_ = allocate(nbytes_, device_, false);
  layout_->write_plain(data_);
  layout_.reset();
  deferred_.store(false, std::memory_order_release);
}

}  // namespace dtrain
