// The tokenizer files' readers: dtrain's BPE merges file and tiktoken's rank file, as make_tokenizer
// reaches them. What loads must encode any bytes (a fixed text and the input itself) to ids below
// its vocabulary that decode back to those bytes.
//
// Input: a flags byte (bit 0: a tiktoken rank file, "gpt2:FILE"; else a merges file, "bpe:FILE"),
// then the file's bytes.
#include "fuzz_support.h"

#include "dtrain/core/error.h"
#include "dtrain/text/tokenizer.h"

#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using dtrain::fuzz::expect;
  const bool tiktoken = size > 0 && (data[0] & 1);
  const auto file = dtrain::fuzz::scratch_dir() / "tokenizer.txt";
  dtrain::fuzz::write_file(file, data + (size > 0), size - (size > 0));
  try {
    const auto tokenizer = dtrain::text::make_tokenizer((tiktoken ? "gpt2:" : "bpe:") + file.string());
    const std::string input(reinterpret_cast<const char*>(data), size);
    for (const std::string& text : {std::string("Hello world, it's 2024!\n\xe6\x97\xa5\xff  x"), input}) {
      const auto ids = tokenizer->encode(text);
      for (std::int32_t id : ids) expect(id >= 0 && id < tokenizer->vocab_size(), "every id is in the vocabulary");
      expect(tokenizer->decode(ids) == text, "decode(encode(text)) is the text");
    }
    dtrain::fuzz::accepted(tokenizer->describe());
  } catch (const dtrain::Error& e) {
    dtrain::fuzz::rejected(e);
  }
  return 0;
}
