// std::source_location for clang 14 with libstdc++ 12 (Debian 12's clang and libFuzzer):
// libstdc++ defines it only when the compiler has __builtin_source_location, which clang
// gained in 15, and dtrain::Error takes one. fuzz/CMakeLists.txt force-includes this header in
// a DTRAIN_FUZZ build with such a clang; it defines the same interface from the older
// builtins, and nothing where the standard header already does.
#pragma once

#include <version>

#ifndef __cpp_lib_source_location
#include <cstdint>

namespace std {

struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           std::uint_least32_t line = __builtin_LINE(),
                                           std::uint_least32_t column = __builtin_COLUMN()) noexcept {
    source_location where;
    where.file_ = file;
    where.function_ = function;
    where.line_ = line;
    where.column_ = column;
    return where;
  }
  constexpr source_location() noexcept = default;
  constexpr std::uint_least32_t line() const noexcept { return line_; }
  constexpr std::uint_least32_t column() const noexcept { return column_; }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  std::uint_least32_t line_ = 0;
  std::uint_least32_t column_ = 0;
};

}  // namespace std
#endif
