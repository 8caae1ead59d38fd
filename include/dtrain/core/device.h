// Where a tensor lives: the CPU or one CUDA device.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain {

enum class DeviceType : std::uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  friend bool operator==(const Device&, const Device&) = default;

  std::string str() const;
  // Parses "cpu", "cuda", "cuda:1"; throws dtrain::Error naming the text otherwise.
  static Device parse(const std::string& text);
};

namespace cuda {
// Number of usable CUDA devices: 0 when dtrain was built without CUDA, when no driver is
// installed, or when no device is present. Never throws.
int device_count();
inline bool available() { return device_count() > 0; }
// Why CUDA is unavailable, in one line ("" when it is available).
std::string unavailable_reason();
// Makes cuda:index this process's device: current on the calling thread, and the one on
// which a thread that has none yet (a loader thread pinning memory) makes its context,
// instead of device 0. dist::rank_cuda_device() calls it. Throws without a device `index`.
void use_device(int index);
// The index given to use_device, else 0.
int home_device();
}  // namespace cuda

}  // namespace dtrain
