#include "dtrain/text/pretokenize.h"

#include "dtrain/core/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>

namespace dtrain::text {
namespace {

// GPT-2's pattern (OpenAI's encoder.py, tiktoken's "gpt2" pat_str), with \s spelled out as the
// Unicode White_Space property, which \s is in tiktoken's regex engine (Rust's): PCRE2's \s also
// takes U+180E, a format character since Unicode 6.3.
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
constexpr std::string_view kWhiteSpace =
    R"(\t-\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000})";

std::string gpt2_pattern() {
  const std::string ws(kWhiteSpace);
  return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" + ws + R"(\p{L}\p{N}]+|[)" + ws + "]+(?![^" + ws + "])|[" +
         ws + "]+";
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// The compiled pattern, once per process: UTF mode with Unicode properties for \s, \p{L}
// and \p{N} (UCP), matching over invalid UTF-8 rather than refusing it, JIT-compiled where
// PCRE2 has a JIT for this CPU (the interpreter otherwise).
class Gpt2Regex {
 public:
  Gpt2Regex() {
    int code = 0;
    PCRE2_SIZE offset = 0;
    const std::string pattern = gpt2_pattern();
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &offset, nullptr);
    DTRAIN_CHECK(code_, "GPT-2's pre-tokenization pattern does not compile in PCRE2 (at {}): {}", offset,
                 pcre2_message(code));
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Gpt2Regex() { pcre2_code_free(code_); }
  Gpt2Regex(const Gpt2Regex&) = delete;
  Gpt2Regex& operator=(const Gpt2Regex&) = delete;

  const pcre2_code* code() const { return code_; }
  bool jit() const { return jit_; }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

const Gpt2Regex& gpt2_regex() {
  static const Gpt2Regex regex;
  return regex;
}

struct MatchState {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data{nullptr, &pcre2_match_data_free};
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> context{nullptr, &pcre2_match_context_free};
  // A long run of one class (a line of ASCII art) needs more than the JIT's default 32 KiB.
  std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)> stack{nullptr, &pcre2_jit_stack_free};
};

}  // namespace

std::vector<std::string_view> pretokenize_gpt2(std::string_view text) {
  const Gpt2Regex& regex = gpt2_regex();
  MatchState state;
  state.data.reset(pcre2_match_data_create_from_pattern(regex.code(), nullptr));
  state.context.reset(pcre2_match_context_create(nullptr));
  DTRAIN_CHECK(state.data && state.context, "pre-tokenization: out of memory for PCRE2's match data");
  if (regex.jit()) {
    state.stack.reset(pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr));
    DTRAIN_CHECK(state.stack, "pre-tokenization: out of memory for PCRE2's JIT stack");
    pcre2_jit_stack_assign(state.context.get(), nullptr, state.stack.get());
  }
  std::vector<std::string_view> pieces;
  pieces.reserve(text.size() / 4 + 1);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t at = 0;
  while (at < text.size()) {
    const int rc = pcre2_match(regex.code(), subject, text.size(), at, 0, state.data.get(), state.context.get());
    if (rc == PCRE2_ERROR_NOMATCH) {
      pieces.push_back(text.substr(at));  // bytes no alternative matches: invalid UTF-8
      break;
    }
    DTRAIN_CHECK(rc >= 0, "pre-tokenization: PCRE2 failed at byte {} of {}: {}", at, text.size(), pcre2_message(rc));
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(state.data.get());
    DTRAIN_CHECK(span[1] > span[0], "pre-tokenization: an empty match at byte {}", span[0]);
    if (span[0] > at) pieces.push_back(text.substr(at, span[0] - at));  // skipped invalid bytes
    pieces.push_back(text.substr(span[0], span[1] - span[0]));
    at = span[1];
  }
  return pieces;
}

}  // namespace dtrain::text
