// The byte-pair merge inside one pre-tokenized piece, shared by dtrain's BPE and the tiktoken
// reader: starting from one part per byte, repeatedly join the adjacent pair of parts whose
// joined token has the lowest id (the leftmost such pair on a tie) until no adjacent pair
// forms a token. In both vocabularies a lower id is a lower merge rank, so this is tiktoken's
// byte_pair_merge. Quadratic in the piece's length, as tiktoken's is; pieces are short.
#pragma once

#include "dtrain/text/pretokenize.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace dtrain::text::detail {

struct Part {
  std::uint32_t start;  // the part's first byte in the piece
  std::int32_t id;      // its token
  std::int32_t joined;  // the token it forms with the next part, or -1
};

// `joined(left, right, start, end)`: the token that the parts `left` and `right` (ids), spanning
// piece bytes [start, end), form together, or -1. `byte_id(b)`: the token of byte b.
template <class ByteId, class Joined>
void byte_pair_merge(std::string_view piece, ByteId byte_id, Joined joined, std::vector<Part>& parts,
                     std::vector<std::int32_t>& out) {
  const auto n = static_cast<std::uint32_t>(piece.size());
  parts.clear();
  for (std::uint32_t i = 0; i < n; ++i) parts.push_back({i, byte_id(static_cast<unsigned char>(piece[i])), -1});
  auto end_of = [&](std::size_t i) { return i + 1 < parts.size() ? parts[i + 1].start : n; };
  auto update = [&](std::size_t i) {
    parts[i].joined = i + 1 < parts.size() ? joined(parts[i].id, parts[i + 1].id, parts[i].start, end_of(i + 1)) : -1;
  };
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) update(i);
  for (;;) {
    std::size_t best = parts.size();
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i].joined >= 0 && (best == parts.size() || parts[i].joined < parts[best].joined)) best = i;
    }
    if (best == parts.size()) break;
    parts[best].id = parts[best].joined;
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    update(best);
    if (best > 0) update(best - 1);
  }
  for (const Part& part : parts) out.push_back(part.id);
}

// Both BPEs' encode: GPT-2's pieces, each encoded by `encode_piece(piece, ids)` onto the ids.
template <class EncodePiece>
std::vector<std::int32_t> encode_pieces(std::string_view text, EncodePiece encode_piece) {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  for (std::string_view piece : pretokenize_gpt2(text)) encode_piece(piece, ids);
  return ids;
}

}  // namespace dtrain::text::detail
