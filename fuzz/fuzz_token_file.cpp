// The token file reader (dtrain's DTRAINTK files and llm.c's .bin files), as a file reaches it:
// read_token_file on the input's bytes; what it accepts must be ids below the vocabulary it
// states, and must write back and read again unchanged.
//
// Input: the file's bytes.
#include "fuzz_support.h"

#include "dtrain/core/error.h"
#include "dtrain/data/token_file.h"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using dtrain::fuzz::expect;
  const auto file = dtrain::fuzz::scratch_dir() / "tokens.bin";
  dtrain::fuzz::write_file(file, data, size);
  try {
    const dtrain::data::TokenData read = dtrain::data::read_token_file(file);
    expect(read.vocab_size >= 0, "the vocab size is 0 (unknown) or positive");
    for (std::int32_t id : read.tokens) {
      expect(id >= 0 && (read.vocab_size == 0 || id < read.vocab_size), "every id is below the vocab size");
    }
    const auto copy = dtrain::fuzz::scratch_dir() / "tokens.copy";
    dtrain::data::write_token_file(copy, read.tokens, read.vocab_size);
    const dtrain::data::TokenData again = dtrain::data::read_token_file(copy);
    expect(again.tokens == read.tokens && again.vocab_size == read.vocab_size, "a written copy reads back equal");
    dtrain::fuzz::accepted(std::to_string(read.tokens.size()) + " tokens of vocab " + std::to_string(read.vocab_size));
  } catch (const dtrain::Error& e) {
    dtrain::fuzz::rejected(e);
  }
  return 0;
}
