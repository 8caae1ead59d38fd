#include "dist/ps/ps_layout.h"

#include "dist/data_parallel/reducer.h"
#include "dtrain/core/error.h"

#include <algorithm>

namespace dtrain::dist {

PsLayout ps_layout(const std::vector<std::int64_t>& numels, std::size_t element_bytes, int servers,
                   std::size_t bucket_bytes) {
  DTRAIN_CHECK(servers >= 1, "parameter server: the number of servers must be >= 1, got {}", servers);
  DTRAIN_CHECK(bucket_bytes > 0, "parameter server: bucket_bytes must be positive");
  std::int64_t total = 0;
  std::vector<BucketParam> sizes;
  for (std::int64_t n : numels) {
    DTRAIN_CHECK(n > 0, "parameter server: a parameter with {} elements", n);
    total += n;
    sizes.push_back({DType::f32, static_cast<std::size_t>(n) * element_bytes});
  }
  DTRAIN_CHECK(total >= servers,
               "parameter server: {} servers for a model of {} parameter elements: each server must own "
               "at least one",
               servers, total);

  PsLayout layout;
  layout.buckets = assign_buckets(sizes, bucket_bytes);
  layout.bucket_pieces.resize(layout.buckets.size());
  layout.server_pieces.resize(static_cast<std::size_t>(servers));
  layout.server_elements.assign(static_cast<std::size_t>(servers), 0);
  // Server s owns the flat range [total * s / servers, total * (s + 1) / servers).
  const auto range_end = [&](int s) { return total * (s + 1) / servers; };
  int server = 0;
  std::int64_t flat = 0;  // position in the flat vector
  for (std::size_t b = 0; b < layout.buckets.size(); ++b) {
    for (std::size_t param : layout.buckets[b]) {
      std::int64_t offset = 0;
      while (offset < numels[param]) {
        while (flat >= range_end(server)) ++server;
        const std::int64_t length = std::min(numels[param] - offset, range_end(server) - flat);
        // A new piece where the bucket or the server changes.
        if (layout.bucket_pieces[b].empty() || layout.pieces[layout.bucket_pieces[b].back()].server != server) {
          layout.bucket_pieces[b].push_back(layout.pieces.size());
          layout.server_pieces[static_cast<std::size_t>(server)].push_back(layout.pieces.size());
          layout.pieces.push_back({.server = server, .bucket = b, .length = 0, .segments = {}});
        }
        PsPiece& piece = layout.pieces.back();
        piece.segments.push_back({.param = param, .offset = offset, .length = length, .at = piece.length});
        piece.length += length;
        layout.server_elements[static_cast<std::size_t>(server)] += length;
        offset += length;
        flat += length;
      }
    }
  }
  return layout;
}

}  // namespace dtrain::dist
