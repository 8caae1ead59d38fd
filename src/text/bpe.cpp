#include "dtrain/text/bpe.h"

#include "dtrain/core/error.h"
#include "text/byte_pair_merge.h"
#include "text/text_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>

namespace dtrain::text {
namespace {

constexpr std::string_view kMagic = "dtrain-bpe/1";

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32 | static_cast<std::uint32_t>(right);
}

// A whole decimal number that fills `text`, or false.
template <class Int>
bool parse_int(std::string_view text, Int& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

}  // namespace

BpeTokenizer::BpeTokenizer(std::vector<Merge> merges, std::string name)
    : merges_(std::move(merges)), name_(std::move(name)) {
  bytes_.reserve(256 + merges_.size());
  for (int b = 0; b < 256; ++b) bytes_.emplace_back(1, static_cast<char>(b));
  rank_.reserve(merges_.size());
  for (std::size_t i = 0; i < merges_.size(); ++i) {
    const auto [left, right] = merges_[i];
    const auto id = static_cast<std::int64_t>(256 + i);
    DTRAIN_CHECK(left >= 0 && right >= 0 && left < id && right < id,
                 "BPE merge {} ({} {}): ids must be below the merge's own id {}", i, left, right, id);
    DTRAIN_CHECK(rank_.emplace(pair_key(left, right), static_cast<std::int32_t>(i)).second,
                 "BPE merge {} ({} {}) repeats an earlier merge", i, left, right);
    bytes_.push_back(bytes_[static_cast<std::size_t>(left)] + bytes_[static_cast<std::size_t>(right)]);
  }
}

BpeTokenizer BpeTokenizer::load(const std::filesystem::path& file) {
  const std::string where = file.string();
  const std::string content = read_text_file(file);
  LineReader lines(content);
  std::string_view line;
  DTRAIN_CHECK(lines.next(line), "'{}': empty file: expected the header '{} <vocab_size>'", where, kMagic);
  std::int64_t vocab = 0;
  const auto space = line.find(' ');
  DTRAIN_CHECK(
      space != std::string_view::npos && line.substr(0, space) == kMagic && parse_int(line.substr(space + 1), vocab),
      "'{}' line 1: expected the header '{} <vocab_size>', got '{}'", where, kMagic, excerpt(line));
  DTRAIN_CHECK(vocab >= 256 && vocab <= (std::int64_t{1} << 31) - 1, "'{}' line 1: vocab size {} is not in [256, 2^31)",
               where, vocab);
  std::vector<Merge> merges;
  merges.reserve(
      std::min<std::size_t>(static_cast<std::size_t>(vocab - 256), content.size() / 4));  // not what a header claims
  while (lines.next(line)) {
    const std::size_t number = lines.number();
    const auto id = static_cast<std::int64_t>(256 + merges.size());
    DTRAIN_CHECK(id < vocab, "'{}' line {}: more merges than the header's vocab size {} allows", where, number, vocab);
    const auto sep = line.find(' ');
    Merge merge;
    DTRAIN_CHECK(sep != std::string_view::npos && parse_int(line.substr(0, sep), merge.first) &&
                     parse_int(line.substr(sep + 1), merge.second),
                 "'{}' line {}: expected a merge 'left right' (two token ids), got '{}'", where, number, excerpt(line));
    DTRAIN_CHECK(merge.first >= 0 && merge.second >= 0 && merge.first < id && merge.second < id,
                 "'{}' line {}: merge '{} {}' has an id beyond the vocabulary so far (ids below {}, the id it makes)",
                 where, number, merge.first, merge.second, id);
    merges.push_back(merge);
  }
  DTRAIN_CHECK(static_cast<std::int64_t>(merges.size()) == vocab - 256,
               "'{}': truncated: the header's vocab size {} needs {} merges, the file has {}", where, vocab,
               vocab - 256, merges.size());
  try {
    return BpeTokenizer(std::move(merges), where);
  } catch (const Error& e) {
    DTRAIN_FAIL("'{}': {}", where, e.message());
  }
}

void BpeTokenizer::save(const std::filesystem::path& file) const {
  std::string text = fmt::format("{} {}\n", kMagic, vocab_size());
  for (const auto& [left, right] : merges_) fmt::format_to(std::back_inserter(text), "{} {}\n", left, right);
  write_text_file(file, text);
}

std::string BpeTokenizer::describe() const {
  return fmt::format("bpe:{} ({})", name_.empty() ? "trained" : name_, vocab_size());
}

const std::string& BpeTokenizer::token_bytes(std::int32_t id) const {
  DTRAIN_CHECK(id >= 0 && id < vocab_size(), "BPE token id {} is outside the vocabulary [0, {})", id, vocab_size());
  return bytes_[static_cast<std::size_t>(id)];
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  thread_local std::vector<detail::Part> parts;
  detail::byte_pair_merge(
      piece, [](unsigned char b) { return static_cast<std::int32_t>(b); },
      [this](std::int32_t left, std::int32_t right, std::uint32_t, std::uint32_t) -> std::int32_t {
        const auto it = rank_.find(pair_key(left, right));
        return it == rank_.end() ? -1 : 256 + it->second;
      },
      parts, out);
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text) const {
  return detail::encode_pieces(
      text, [this](std::string_view piece, std::vector<std::int32_t>& ids) { encode_piece(piece, ids); });
}

std::string BpeTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string text;
  for (std::int32_t id : ids) text += token_bytes(id);
  return text;
}

}  // namespace dtrain::text
