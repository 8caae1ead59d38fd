// How a parameter server job cuts the model's gradients and parameters into messages
// (private to dist). The trainable parameters, walked in the order backward finishes them,
// form one flat vector; the DataParallel reducer's bucketing cuts it into buckets (pushed as
// they fill during backward), and servers own equal contiguous ranges of it (balanced by
// bytes: a parameter that straddles a range's end is split). A piece is what one bucket
// holds of one server's range: the unit that is pushed, applied and pulled. Every rank
// computes the same layout from the same parameter sizes.
#pragma once

#include "dtrain/comm/partition.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtrain::dist {

// Elements [offset, offset + length) of parameter `param`, at `at` in its piece.
struct PsSegment {
  std::size_t param = 0;  // index in registration order
  std::int64_t offset = 0;
  std::int64_t length = 0;
  std::int64_t at = 0;
};

struct PsPiece {
  int server = 0;
  std::size_t bucket = 0;
  std::int64_t length = 0;  // elements
  std::vector<PsSegment> segments;
};

struct PsLayout {
  std::vector<PsPiece> pieces;                          // bucket by bucket, servers ascending within a bucket
  std::vector<std::vector<std::size_t>> buckets;        // parameter indices, in backward order
  std::vector<std::vector<std::size_t>> bucket_pieces;  // per bucket: its piece indices
  std::vector<std::vector<std::size_t>> server_pieces;  // per server: its piece indices
  std::vector<std::int64_t> server_elements;            // per server: elements it owns
};

// `numels`: each trainable parameter's element count, in registration order (all of one
// dtype of `element_bytes`). Throws when a server would own nothing (more servers than
// elements) or an argument is out of range.
PsLayout ps_layout(const std::vector<std::int64_t>& numels, std::size_t element_bytes, int servers,
                   std::size_t bucket_bytes);

}  // namespace dtrain::dist
