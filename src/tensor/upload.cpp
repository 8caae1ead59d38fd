#include "dtrain/tensor/upload.h"

#include "dtrain/tensor/stream.h"
#include "tensor/backend.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace dtrain {

Upload::Upload(const Tensor& host, Device device) {
  DTRAIN_CHECK(host.defined(), "Upload: the tensor is undefined");
  if (!device.is_cuda() || !host.is_pinned() || !host.is_contiguous()) {
    tensor_ = host.to(device);
    return;
  }
  tensor_ = Tensor::empty(host.shape(), {host.dtype(), device});
  // The host storage rides along with the copy, so that it is not reused before it is done.
  done_ = detail::backend(device).copy_from_host_beside(host.raw_data(), tensor_.raw_data(), host.nbytes(),
                                                        host.storage());
}

Upload::Upload(Upload&& other) noexcept
    : tensor_(std::move(other.tensor_)), done_(std::exchange(other.done_, nullptr)) {}

Upload& Upload::operator=(Upload&& other) noexcept {
  if (this != &other) {
    order_after_copy();
    tensor_ = std::move(other.tensor_);
    done_ = std::exchange(other.done_, nullptr);
  }
  return *this;
}

Upload::~Upload() { order_after_copy(); }

const Tensor& Upload::get() {
  if (done_) {
    detail::backend(tensor_.device()).wait_for(done_);
    done_.reset();
  }
  return tensor_;
}

// If the device cannot be ordered after the copy, the host waits for the device instead;
// if even that fails, the destination is leaked rather than handed to the block cache
// while the copy may still write it.
void Upload::order_after_copy() noexcept {
  if (!done_) return;
  try {
    detail::backend(tensor_.device()).wait_for(done_);
  } catch (const std::exception& e) {
    spdlog::error("Upload: ordering the device after an upload failed: {}", e.what());
    try {
      synchronize(tensor_.device());
    } catch (const std::exception&) {
      new Tensor(std::move(tensor_));  // deliberately leaked: see above
    }
  }
  done_.reset();
}

}  // namespace dtrain
