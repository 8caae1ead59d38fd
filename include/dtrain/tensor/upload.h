// Upload: a host-to-GPU copy that overlaps the GPU's work, the device half of a data
// prefetch. Queue the next batch's upload before the current step's kernels; the copy
// runs on the device's copy stream beside them (it only waits for work queued before it,
// so its destination block is free), and get() orders the compute stream after the copy
// when the batch is used, without blocking the host.
//
//   Upload next(batch.inputs, gpu);    // batch.inputs pinned (DataLoaderOptions::pin_memory)
//   ... queue this step's work ...
//   const Tensor& x = next.get();      // kernels queued from here on see the data
//
// A source that is not pinned, not contiguous, or already on the device is copied the
// plain way (to(device)), and get() just returns it. Dropping an Upload without get()
// still orders the compute stream after the copy, so its memory is never reused early.
#pragma once

#include "dtrain/tensor/tensor.h"

#include <memory>

namespace dtrain {

class Upload {
 public:
  Upload() = default;
  Upload(const Tensor& host, Device device);
  Upload(Upload&& other) noexcept;
  Upload& operator=(Upload&& other) noexcept;
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;
  ~Upload();

  // The device tensor, ordered after the copy on the device's stream.
  const Tensor& get();

 private:
  void order_after_copy() noexcept;  // what the destructor and get() share

  Tensor tensor_;
  std::shared_ptr<void> done_;  // the copy's event until the compute stream waits for it
};

}  // namespace dtrain
