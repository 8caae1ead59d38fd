#include "dtrain/core/device.h"

#include "dtrain/core/error.h"

#include <charconv>

namespace dtrain {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    int index = -1;
    const char* begin = text.data() + 5;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(begin, end, index);
    if (ec == std::errc() && ptr == end && begin != end && index >= 0) return cuda(index);
  }
  DTRAIN_FAIL("device '{}': expected cpu, cuda or cuda:N", text);
}

}  // namespace dtrain
