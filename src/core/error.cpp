#include "dtrain/core/error.h"

#include <cstring>

namespace dtrain {
namespace {
const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

Error::Error(const std::string& message, std::source_location where)
    : std::runtime_error(fmt::format("{} ({}:{})", message, base_name(where.file_name()), where.line())),
      message_(message),
      file_(where.file_name()),
      line_(static_cast<int>(where.line())) {}

}  // namespace dtrain
