// train_bpe: counts the pre-tokenized pieces once, then merges pairs with incremental counts.
// Each distinct piece is a "word" (its symbols and how often it occurs); for every adjacent
// pair the total count and the words it occurs in are kept, and a merge rewrites only those
// words, adjusting the counts of the pairs it removes and forms. The most frequent pair comes
// from a max-heap whose stale entries (an older count) are dropped when they surface.
#include "dtrain/core/error.h"
#include "dtrain/text/bpe.h"
#include "dtrain/text/pretokenize.h"

#include <algorithm>
#include <queue>
#include <string_view>
#include <unordered_map>

namespace dtrain::text {
namespace {

using Key = std::uint64_t;  // left << 32 | right: ordering keys orders (left, right)

Key key_of(std::int32_t left, std::int32_t right) {
  return static_cast<Key>(static_cast<std::uint32_t>(left)) << 32 | static_cast<std::uint32_t>(right);
}

struct Candidate {
  std::int64_t count;
  Key key;
  // The heap's top is the highest count, then the smallest (left, right).
  bool operator<(const Candidate& other) const { return count != other.count ? count < other.count : key > other.key; }
};

struct KeyHash {
  std::size_t operator()(Key key) const noexcept { return key * 0x9E3779B97F4A7C15ull >> 13; }
};

class Trainer {
 public:
  explicit Trainer(const std::vector<std::string>& texts) {
    std::unordered_map<std::string_view, std::int64_t> counts;
    for (const std::string& text : texts) {
      for (std::string_view piece : pretokenize_gpt2(text)) ++counts[piece];
    }
    // Sorted, so that the words' order (and so nothing in the result) depends on hashing.
    std::vector<std::pair<std::string_view, std::int64_t>> pieces(counts.begin(), counts.end());
    std::sort(pieces.begin(), pieces.end());
    words_.reserve(pieces.size());
    for (const auto& [piece, count] : pieces) {
      Word word{{}, count};
      for (char c : piece) word.symbols.push_back(static_cast<unsigned char>(c));
      words_.push_back(std::move(word));
    }
    for (std::size_t w = 0; w < words_.size(); ++w) {
      const Word& word = words_[w];
      for (std::size_t i = 0; i + 1 < word.symbols.size(); ++i) {
        const Key key = key_of(word.symbols[i], word.symbols[i + 1]);
        pair_counts_[key] += word.count;
        note_occurrence(key, static_cast<std::int32_t>(w));
      }
    }
    for (const auto& [key, count] : pair_counts_) heap_.push({count, key});
  }

  // The next merge, or false when no adjacent pair is left.
  bool merge_next(std::int32_t new_id, BpeTokenizer::Merge& merge) {
    while (!heap_.empty()) {
      const Candidate top = heap_.top();
      heap_.pop();
      const auto it = pair_counts_.find(top.key);
      if (it == pair_counts_.end() || it->second != top.count || top.count <= 0) continue;  // stale
      merge = {static_cast<std::int32_t>(top.key >> 32), static_cast<std::int32_t>(top.key & 0xffffffffu)};
      apply(merge, new_id);
      return true;
    }
    return false;
  }

 private:
  struct Word {
    std::vector<std::int32_t> symbols;
    std::int64_t count;
  };

  void note_occurrence(Key key, std::int32_t word) {
    auto& list = where_[key];
    if (list.empty() || list.back() != word) list.push_back(word);
  }

  void apply(const BpeTokenizer::Merge& merge, std::int32_t new_id) {
    const Key merged_key = key_of(merge.first, merge.second);
    std::vector<std::int32_t> affected = std::move(where_[merged_key]);
    where_.erase(merged_key);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    delta_.clear();
    std::vector<std::int32_t> rewritten;
    for (std::int32_t w : affected) {
      Word& word = words_[static_cast<std::size_t>(w)];
      const auto& old = word.symbols;
      rewritten.clear();
      for (std::size_t i = 0; i < old.size(); ++i) {
        if (i + 1 < old.size() && old[i] == merge.first && old[i + 1] == merge.second) {
          rewritten.push_back(new_id);
          ++i;
        } else {
          rewritten.push_back(old[i]);
        }
      }
      if (rewritten.size() == old.size()) continue;  // an occurrence an earlier merge consumed
      for (std::size_t i = 0; i + 1 < old.size(); ++i) delta_[key_of(old[i], old[i + 1])] -= word.count;
      for (std::size_t i = 0; i + 1 < rewritten.size(); ++i) {
        const Key key = key_of(rewritten[i], rewritten[i + 1]);
        delta_[key] += word.count;
        if (rewritten[i] == new_id || rewritten[i + 1] == new_id) note_occurrence(key, w);
      }
      word.symbols.swap(rewritten);
    }
    for (const auto& [key, change] : delta_) {
      if (change == 0) continue;
      std::int64_t& count = pair_counts_[key];
      count += change;
      if (count > 0) {
        heap_.push({count, key});
      } else {
        pair_counts_.erase(key);
      }
    }
  }

  std::vector<Word> words_;
  std::unordered_map<Key, std::int64_t, KeyHash> pair_counts_;
  std::unordered_map<Key, std::vector<std::int32_t>, KeyHash> where_;
  std::unordered_map<Key, std::int64_t, KeyHash> delta_;
  std::priority_queue<Candidate> heap_;
};

}  // namespace

BpeTokenizer train_bpe(const std::vector<std::string>& texts, std::int64_t vocab_size) {
  DTRAIN_CHECK(vocab_size >= 256 && vocab_size <= (std::int64_t{1} << 31) - 1,
               "train_bpe: vocab size {} is not in [256, 2^31) (256 byte tokens, then merges)", vocab_size);
  Trainer trainer(texts);
  std::vector<BpeTokenizer::Merge> merges;
  merges.reserve(static_cast<std::size_t>(std::min<std::int64_t>(vocab_size - 256, 1 << 16)));
  BpeTokenizer::Merge merge;
  while (static_cast<std::int64_t>(256 + merges.size()) < vocab_size &&
         trainer.merge_next(static_cast<std::int32_t>(256 + merges.size()), merge)) {
    merges.push_back(merge);
  }
  return BpeTokenizer(std::move(merges));
}

}  // namespace dtrain::text
