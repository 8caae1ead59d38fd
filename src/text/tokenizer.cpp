#include "dtrain/text/tokenizer.h"

#include "dtrain/core/error.h"
#include "dtrain/text/bpe.h"
#include "dtrain/text/tiktoken.h"

namespace dtrain::text {

Tokenizer::~Tokenizer() = default;

std::vector<std::int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string text(ids.size(), '\0');
  for (std::size_t i = 0; i < ids.size(); ++i) {
    DTRAIN_CHECK(ids[i] >= 0 && ids[i] < 256, "byte token id {} (at {}) is outside the vocabulary [0, 256)", ids[i], i);
    text[i] = static_cast<char>(ids[i]);
  }
  return text;
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec) {
  if (spec == "bytes") return std::make_unique<ByteTokenizer>();
  const auto colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const std::string_view file = colon == std::string_view::npos ? std::string_view() : spec.substr(colon + 1);
  DTRAIN_CHECK((kind == "bpe" || kind == "gpt2") && !file.empty(),
               "tokenizer '{}': expected bytes, bpe:FILE (dtrain's BPE merges) or gpt2:FILE (a tiktoken rank file)",
               spec);
  if (kind == "bpe") return std::make_unique<BpeTokenizer>(BpeTokenizer::load(std::filesystem::path(file)));
  return std::make_unique<TiktokenTokenizer>(TiktokenTokenizer::load(std::filesystem::path(file)));
}

}  // namespace dtrain::text
