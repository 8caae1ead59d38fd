// dtrain::Error and the checks that throw it. The library never exits or aborts:
// every failure becomes an exception that names what was expected, so that a caller
// (or main()) decides what happens, and a failing rank can tell the others.
#pragma once

#include <fmt/format.h>

#include <source_location>
#include <stdexcept>
#include <string>

namespace dtrain {

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, std::source_location where = std::source_location::current());
  // The message without the source location, for one-line user-facing errors.
  const std::string& message() const noexcept { return message_; }
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }

 private:
  std::string message_;
  const char* file_;
  int line_;
};

}  // namespace dtrain

// DTRAIN_CHECK(cond, "fmt {}", args...): throws dtrain::Error with the formatted message
// when cond is false. A macro only so that the message is built on the failure path.
#define DTRAIN_CHECK(cond, ...)                                                   \
  do {                                                                            \
    if (!(cond)) [[unlikely]] {                                                   \
      throw ::dtrain::Error(::fmt::format(__VA_ARGS__));                          \
    }                                                                             \
  } while (0)

#define DTRAIN_FAIL(...) throw ::dtrain::Error(::fmt::format(__VA_ARGS__))
