// dtrain's byte-level BPE: 256 byte tokens, then merges learned from a corpus (train_bpe),
// each a pair of earlier ids whose concatenation becomes the next id. Encoding is GPT-2's:
// pre-tokenize (pretokenize.h), then inside each piece merge the adjacent pair with the lowest
// merge rank until none applies. File format (save/load): docs/TOKENIZERS.md.
#pragma once

#include "dtrain/text/tokenizer.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dtrain::text {

class BpeTokenizer final : public Tokenizer {
 public:
  using Merge = std::pair<std::int32_t, std::int32_t>;  // (left id, right id); makes id 256 + index

  // Each merge's ids must be below its own id (256 + its index).
  explicit BpeTokenizer(std::vector<Merge> merges, std::string name = "");

  // The "dtrain-bpe/1 <vocab_size>" file: a bad header, a truncated file, a malformed line or an
  // id beyond the vocabulary so far is an error naming the file and the line.
  static BpeTokenizer load(const std::filesystem::path& file);
  // Written to a temporary name beside `file`, then renamed over it.
  void save(const std::filesystem::path& file) const;

  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int64_t vocab_size() const override { return 256 + static_cast<std::int64_t>(merges_.size()); }
  std::string describe() const override;

  const std::vector<Merge>& merges() const { return merges_; }
  // The bytes of token `id`.
  const std::string& token_bytes(std::int32_t id) const;

 private:
  struct PairHash {
    std::size_t operator()(std::uint64_t key) const noexcept { return key * 0x9E3779B97F4A7C15ull >> 17; }
  };
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;

  std::vector<Merge> merges_;
  std::string name_;                                                // the file it came from, for describe()
  std::vector<std::string> bytes_;                                  // per id
  std::unordered_map<std::uint64_t, std::int32_t, PairHash> rank_;  // (left << 32 | right) -> merge index
};

// Learns merges from `texts` until the vocabulary has `vocab_size` ids (>= 256), or fewer when
// no adjacent pair is left: each step merges the most frequent adjacent pair inside the
// pre-tokenized pieces, ties to the smallest (left id, right id).
BpeTokenizer train_bpe(const std::vector<std::string>& texts, std::int64_t vocab_size);

}  // namespace dtrain::text
