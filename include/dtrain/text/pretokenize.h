// GPT-2's pre-tokenization: the text cut into pieces by the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (PCRE2, UTF mode with Unicode properties; \s as Unicode's White_Space, which it is in tiktoken),
// before byte-pair merges run inside each piece.
// Bytes no alternative matches (invalid UTF-8) become pieces of their own, so that the
// pieces always cover the whole text.
#pragma once

#include <string_view>
#include <vector>

namespace dtrain::text {

// The pieces of `text`, in order, as views into it; their concatenation is `text`.
std::vector<std::string_view> pretokenize_gpt2(std::string_view text);

}  // namespace dtrain::text
