// A reference-counted block of memory on one device. Tensors are views into a Storage.
#pragma once

#include "dtrain/core/device.h"

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

namespace dtrain {

// Another arrangement of a Storage's bytes: the CPU backend's convolutions write their
// f32 outputs in oneDNN's blocked-channel layout, and the kernels that read that layout
// (the next convolution, ReLU, additions, batch norm) take it as it is instead of
// reordering to plain NCHW and back around every call. Storage::data() turns it into the
// plain layout on first use, so code that does not know about it sees an ordinary tensor.
class StorageLayout {
 public:
  virtual ~StorageLayout() = default;
  // The bytes in this arrangement.
  virtual void* data() const = 0;
  // Writes the plain (row-major, contiguous) bytes, the Storage's nbytes() of them.
  virtual void write_plain(void* plain) const = 0;
};

class Storage {
 public:
  // Allocates nbytes on `device` through that device's backend allocator, or page-locked
  // host memory when `pinned` (device must be the CPU).
  Storage(std::size_t nbytes, Device device, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // The plain bytes; a storage that holds another layout is converted first, once, and
  // keeps only the plain bytes from then on (the caller may write them).
  void* data() const {
    if (deferred_.load(std::memory_order_acquire)) materialize();
    return data_;
  }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

  // The other arrangement this storage's bytes are held in, or null when they are plain.
  std::shared_ptr<const StorageLayout> layout() const;
  // From now on the bytes are `layout`'s; the plain memory goes back to the allocator
  // until data() is called. For a kernel's freshly allocated output only (CPU, not pinned).
  void replace_with_layout(std::shared_ptr<const StorageLayout> layout);

  // Frees the bytes while the Storage, and every view of it, lives on: reading or writing
  // them throws `why` until reallocate(). For memory needed only part of the time: sharded
  // data parallelism's stage 3 gathers a layer's parameters into their storage for the
  // layer's forward and backward and frees it in between, while the autograd graph still
  // holds views of it. Not for pinned memory.
  void release(std::string why);
  // Allocates the bytes again (their values undefined); nothing when they are there.
  void reallocate();
  bool released() const;

 private:
  void materialize() const;

  mutable void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  bool pinned_ = false;
  mutable std::mutex layout_mutex_;
  mutable std::shared_ptr<const StorageLayout> layout_;
  mutable std::atomic<bool> deferred_{false};  // the bytes are not plain: held in layout_, or released
  std::string released_why_;                   // set while released
};

}  // namespace dtrain
