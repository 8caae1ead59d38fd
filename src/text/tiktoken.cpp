#include "dtrain/text/tiktoken.h"

#include "dtrain/core/error.h"
#include "text/byte_pair_merge.h"
#include "text/text_file.h"

#include <fmt/format.h>

#include <array>
#include <charconv>

namespace dtrain::text {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

constexpr std::array<std::int8_t, 256> base64_values() {
  std::array<std::int8_t, 256> values{};
  values.fill(-1);
  constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (std::size_t i = 0; i < alphabet.size(); ++i)
    values[static_cast<unsigned char>(alphabet[i])] = static_cast<std::int8_t>(i);
  return values;
}

}  // namespace

bool decode_base64(std::string_view text, std::string& out) {
  static constexpr auto kValues = base64_values();
  out.clear();
  if (text.empty() || text.size() % 4 != 0) return false;
  std::size_t padding = 0;
  while (padding < 2 && text[text.size() - 1 - padding] == '=') ++padding;
  const std::size_t digits = text.size() - padding;
  std::uint32_t bits = 0;
  int held = 0;
  for (std::size_t i = 0; i < digits; ++i) {
    const std::int8_t v = kValues[static_cast<unsigned char>(text[i])];
    if (v < 0) return false;
    bits = (bits << 6 | static_cast<std::uint32_t>(v)) & 0xffffff;
    held += 6;
    if (held >= 8) {
      held -= 8;
      out += static_cast<char>((bits >> held) & 0xff);
    }
  }
  // The bits left over after the last byte must be zero (canonical encoding).
  return (bits & ((1u << held) - 1)) == 0;
}

TiktokenTokenizer TiktokenTokenizer::load(const std::filesystem::path& file) {
  const std::string where = file.string();
  const std::string content = read_text_file(file);
  struct Entry {
    std::string bytes;
    std::int64_t rank;
    std::size_t line;
  };
  std::vector<Entry> entries;
  LineReader lines(content);
  std::string_view line;
  while (lines.next(line)) {
    const auto space = line.find(' ');
    Entry entry{{}, -1, lines.number()};
    const std::string_view rank = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    const auto [end, ec] = std::from_chars(rank.data(), rank.data() + rank.size(), entry.rank);
    DTRAIN_CHECK(space != std::string_view::npos && ec == std::errc() && end == rank.data() + rank.size() &&
                     !rank.empty() && entry.rank >= 0,
                 "'{}' line {}: expected '<base64 token bytes> <rank>', got '{}'", where, entry.line, excerpt(line));
    DTRAIN_CHECK(decode_base64(line.substr(0, space), entry.bytes), "'{}' line {}: bad base64 '{}'", where, entry.line,
                 excerpt(line.substr(0, space)));
    entries.push_back(std::move(entry));
  }
  DTRAIN_CHECK(!entries.empty(), "'{}': no tokens: expected lines '<base64 token bytes> <rank>'", where);
  DTRAIN_CHECK(entries.size() < (std::size_t{1} << 31) - 1, "'{}': too many tokens ({})", where, entries.size());
  TiktokenTokenizer tokenizer;
  tokenizer.name_ = where;
  tokenizer.bytes_.resize(entries.size());
  tokenizer.ranks_.reserve(entries.size());
  std::vector<std::size_t> line_of_rank(entries.size(), 0);
  for (Entry& entry : entries) {
    DTRAIN_CHECK(entry.rank < static_cast<std::int64_t>(entries.size()),
                 "'{}' line {}: rank {} is beyond the file's {} tokens (ranks must be 0..{})", where, entry.line,
                 entry.rank, entries.size(), entries.size() - 1);
    const auto rank = static_cast<std::size_t>(entry.rank);
    DTRAIN_CHECK(line_of_rank[rank] == 0, "'{}' line {}: rank {} repeats line {}", where, entry.line, rank,
                 line_of_rank[rank]);
    line_of_rank[rank] = entry.line;
    const auto [it, fresh] = tokenizer.ranks_.emplace(entry.bytes, static_cast<std::int32_t>(rank));
    DTRAIN_CHECK(fresh, "'{}' line {}: token '{}' repeats line {}", where, entry.line, excerpt(entry.bytes),
                 line_of_rank[static_cast<std::size_t>(it->second)]);
    tokenizer.bytes_[rank] = std::move(entry.bytes);
  }
  for (int b = 0; b < 256; ++b) {
    DTRAIN_CHECK(tokenizer.rank_of(std::string(1, static_cast<char>(b))) >= 0,
                 "'{}': byte 0x{:02x} is not a token (a byte-level BPE has all 256 single bytes)", where, b);
  }
  return tokenizer;
}

std::string TiktokenTokenizer::describe() const { return fmt::format("gpt2:{} ({})", name_, vocab_size()); }

std::int32_t TiktokenTokenizer::rank_of(std::string_view bytes) const {
  const auto it = ranks_.find(bytes);
  return it == ranks_.end() ? -1 : it->second;
}

void TiktokenTokenizer::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  // A piece that is a token is that token (tiktoken looks it up before merging).
  if (const std::int32_t whole = rank_of(piece); whole >= 0) {
    out.push_back(whole);
    return;
  }
  thread_local std::vector<detail::Part> parts;
  detail::byte_pair_merge(
      piece, [this](unsigned char b) { return rank_of(std::string_view(reinterpret_cast<const char*>(&b), 1)); },
      [this, piece](std::int32_t, std::int32_t, std::uint32_t start, std::uint32_t end) {
        return rank_of(piece.substr(start, end - start));
      },
      parts, out);
}

std::vector<std::int32_t> TiktokenTokenizer::encode(std::string_view text) const {
  return detail::encode_pieces(
      text, [this](std::string_view piece, std::vector<std::int32_t>& ids) { encode_piece(piece, ids); });
}

std::string TiktokenTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string text;
  for (std::int32_t id : ids) {
    DTRAIN_CHECK(id >= 0 && id < vocab_size(), "GPT-2 token id {} is outside the vocabulary [0, {})", id, vocab_size());
    text += id == end_of_text() ? std::string(kEndOfText) : bytes_[static_cast<std::size_t>(id)];
  }
  return text;
}

}  // namespace dtrain::text
