// Token files: a corpus's token ids, for language-model training. Two formats, told apart by
// their first bytes (docs/TOKENIZERS.md has both):
//   - dtrain's: a 32-byte header (magic "DTRAINTK", version 1, id width 2 or 4, vocab size,
//     token count), then the ids as little-endian uint16 (vocab <= 65536) or uint32;
//   - llm.c's .bin files as its dev/data scripts write them: 256 int32 (magic 20240520 with
//     version 1 and uint16 ids, GPT-2's; or 20240801 with version 7 and uint32 ids, LLaMA 3's),
//     the third the token count, then the ids. Their vocab size is not in the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace dtrain::data {

struct TokenData {
  std::vector<std::int32_t> tokens;
  std::int64_t vocab_size = 0;  // 0: unknown (llm.c files)
};

// A truncated or over-long file, a wrong magic or version, or an id >= the vocab size is an
// error naming the file.
TokenData read_token_file(const std::filesystem::path& file);

// dtrain's format, uint16 ids when vocab_size <= 65536; vocab_size 0 (unknown) picks the width
// from the largest id. Every id must be in [0, vocab_size). Written to a temporary name beside
// `file`, then renamed over it.
void write_token_file(const std::filesystem::path& file, std::span<const std::int32_t> tokens, std::int64_t vocab_size);

}  // namespace dtrain::data
