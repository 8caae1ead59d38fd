// Tokenizers: text (bytes) to token ids and back. Three kinds, chosen by a spec string
// (make_tokenizer): "bytes" (one id per byte), "bpe:FILE" (dtrain's byte-level BPE merges,
// bpe.h) and "gpt2:FILE" (GPT-2's BPE from a tiktoken rank file, tiktoken.h). File formats
// and the algorithms: docs/TOKENIZERS.md.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::text {

class Tokenizer {
 public:
  virtual ~Tokenizer();
  // Every byte of `text` is covered: decode(encode(text)) == text, for any bytes.
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // The tokens' bytes, concatenated: possibly invalid UTF-8 where a cut splits a character.
  // An id outside [0, vocab_size()) is an error naming it.
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;
  virtual std::int64_t vocab_size() const = 0;
  // What it is, for logs: "bytes (256)", "bpe:FILE (2048)", "gpt2:FILE (50257)".
  virtual std::string describe() const = 0;
};

// One id per byte: vocabulary 256, id = the byte's value.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int64_t vocab_size() const override { return 256; }
  std::string describe() const override { return "bytes (256)"; }
};

// "bytes" | "bpe:FILE" | "gpt2:FILE"; a bad spec or file is an error naming it.
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec);

}  // namespace dtrain::text
