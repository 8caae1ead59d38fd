// GPT-2's tokenizer from a tiktoken rank file (gpt2.tiktoken: one "<base64 token bytes> <rank>"
// line per token), encoding and decoding as tiktoken's Encoding does: GPT-2's pre-tokenization
// (pretokenize.h), then in each piece that is not a token itself, byte-pair merges that join the
// adjacent parts whose concatenation has the lowest rank. The ids are the ranks; the one special
// token, <|endoftext|>, comes after them (50256 for GPT-2), and encoding ordinary text never
// produces it (tiktoken's encode_ordinary).
#pragma once

#include "dtrain/text/tokenizer.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

namespace dtrain::text {

class TiktokenTokenizer final : public Tokenizer {
 public:
  // The ranks must be 0..N-1, each once, and every single byte must be a token. A malformed
  // line, bad base64 or a rank out of place is an error naming the file and the line.
  static TiktokenTokenizer load(const std::filesystem::path& file);

  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(bytes_.size()) + 1; }
  std::string describe() const override;

  std::int32_t end_of_text() const { return static_cast<std::int32_t>(bytes_.size()); }

 private:
  TiktokenTokenizer() = default;
  std::int32_t rank_of(std::string_view bytes) const;  // -1 when not a token
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;

  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::string name_;
  std::vector<std::string> bytes_;  // per rank
  std::unordered_map<std::string, std::int32_t, Hash, std::equal_to<>> ranks_;
};

// Base64 (RFC 4648's alphabet, '=' padding) to bytes; false on anything else.
bool decode_base64(std::string_view text, std::string& out);

}  // namespace dtrain::text
