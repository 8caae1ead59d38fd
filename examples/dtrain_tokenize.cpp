// dtrain-tokenize: tokenizers and token files from the command line.
//   dtrain-tokenize train --vocab N --out FILE CORPUS...      learn dtrain BPE merges (docs/TOKENIZERS.md)
//   dtrain-tokenize encode --tokenizer SPEC --out FILE CORPUS  write a token file
//   dtrain-tokenize decode --tokenizer SPEC FILE               print a token file's text
// A CORPUS is a text file, a .gz/.dz file or a folder (dtrain/text/corpus.h says which of its files
// count); several files are read in that order, concatenated. SPEC: bytes, bpe:FILE or gpt2:FILE.
// Each command ends with one summary line (on stderr for decode, whose text goes to stdout).
#include "dtrain/core/error.h"
#include "dtrain/data/token_file.h"
#include "dtrain/text/bpe.h"
#include "dtrain/text/corpus.h"
#include "dtrain/text/tokenizer.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Config {
  std::int64_t vocab = 2048;
  std::string out;
  std::string tokenizer;
  std::vector<std::string> corpora;
  std::string token_file;
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The corpora's files' contents, in order.
std::vector<std::string> read_corpora(const std::vector<std::string>& corpora, std::size_t& bytes) {
  std::vector<std::string> texts;
  bytes = 0;
  for (const std::string& corpus : corpora) {
    for (const fs::path& file : dtrain::text::corpus_files(corpus)) {
      texts.push_back(dtrain::text::read_corpus_file(file));
      bytes += texts.back().size();
    }
  }
  return texts;
}

void summary(std::FILE* to, const char* what, std::size_t files, std::size_t bytes, std::size_t tokens,
             double seconds) {
  fmt::print(to, "{}: {} file(s), {} bytes, {} tokens, {:.2f} bytes/token, {:.2f} s\n", what, files, bytes, tokens,
             tokens ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0.0, seconds);
}

int train(const Config& c) {
  const auto start = Clock::now();
  std::size_t bytes = 0;
  const std::vector<std::string> texts = read_corpora(c.corpora, bytes);
  const dtrain::text::BpeTokenizer bpe = dtrain::text::train_bpe(texts, c.vocab);
  bpe.save(c.out);
  std::size_t tokens = 0;
  for (const std::string& text : texts) tokens += bpe.encode(text).size();
  fmt::print("wrote {}: vocab {} ({} merges)\n", c.out, bpe.vocab_size(), bpe.merges().size());
  summary(stdout, "train", texts.size(), bytes, tokens, seconds_since(start));
  return 0;
}

int encode(const Config& c) {
  const auto start = Clock::now();
  const auto tokenizer = dtrain::text::make_tokenizer(c.tokenizer);
  std::size_t bytes = 0;
  const std::vector<std::string> texts = read_corpora(c.corpora, bytes);
  std::vector<std::int32_t> tokens;
  for (const std::string& text : texts) {
    const std::vector<std::int32_t> ids = tokenizer->encode(text);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  dtrain::data::write_token_file(c.out, tokens, tokenizer->vocab_size());
  fmt::print("wrote {} with {}\n", c.out, tokenizer->describe());
  summary(stdout, "encode", texts.size(), bytes, tokens.size(), seconds_since(start));
  return 0;
}

int decode(const Config& c) {
  const auto start = Clock::now();
  const auto tokenizer = dtrain::text::make_tokenizer(c.tokenizer);
  const dtrain::data::TokenData data = dtrain::data::read_token_file(c.token_file);
  DTRAIN_CHECK(data.vocab_size == 0 || data.vocab_size == tokenizer->vocab_size(),
               "'{}' holds tokens of a vocabulary of {}, not {}'s", c.token_file, data.vocab_size,
               tokenizer->describe());
  const std::string text = tokenizer->decode(data.tokens);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  summary(stderr, "decode", 1, text.size(), data.tokens.size(), seconds_since(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Train dtrain's byte-level BPE, encode text corpora into token files and decode them "
      "(docs/TOKENIZERS.md).",
      "dtrain-tokenize"};
  app.require_subcommand(1);
  Config c;
  CLI::App* train_cmd = app.add_subcommand("train", "learn BPE merges from corpora and write the merges file");
  train_cmd->add_option("--vocab", c.vocab, "vocabulary size: 256 byte tokens, then merges")
      ->check(CLI::Range(std::int64_t{256}, std::int64_t{1} << 24))
      ->capture_default_str();
  train_cmd->add_option("--out", c.out, "the merges file to write")->required();
  train_cmd->add_option("CORPUS", c.corpora, "text files, .gz/.dz files or folders")->required();
  CLI::App* encode_cmd =
      app.add_subcommand("encode", "write the corpus's tokens (its files concatenated) to a token file");
  encode_cmd->add_option("--tokenizer", c.tokenizer, "bytes, bpe:FILE or gpt2:FILE")->required();
  encode_cmd->add_option("--out", c.out, "the token file to write")->required();
  encode_cmd->add_option("CORPUS", c.corpora, "a text file, a .gz/.dz file or a folder")->required()->expected(1);
  CLI::App* decode_cmd = app.add_subcommand("decode", "print a token file's text to stdout");
  decode_cmd->add_option("--tokenizer", c.tokenizer, "bytes, bpe:FILE or gpt2:FILE")->required();
  decode_cmd->add_option("FILE", c.token_file, "a token file (dtrain's or llm.c's .bin)")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    if (train_cmd->parsed()) return train(c);
    if (encode_cmd->parsed()) return encode(c);
    return decode(c);
  } catch (const dtrain::Error& e) {
    fmt::print(stderr, "dtrain-tokenize: error: {}\n", e.message());
  } catch (const std::exception& e) {
    fmt::print(stderr, "dtrain-tokenize: error: {}\n", e.what());
  }
  return 1;
}
