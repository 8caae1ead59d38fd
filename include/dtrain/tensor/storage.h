// A reference-counted block of memory on one device. Tensors are views into a Storage.
#pragma once

#include "dtrain/core/device.h"

#include <cstddef>
#include <memory>

namespace dtrain {

class Storage {
 public:
  // Allocates nbytes on `device` through that device's backend allocator, or page-locked
  // host memory when `pinned` (device must be the CPU).
  Storage(std::size_t nbytes, Device device, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  bool pinned_ = false;
};

}  // namespace dtrain
