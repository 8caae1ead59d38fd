// How a count of elements is cut into n nearly equal slices: the collective algorithms' chunks,
// ZeRO shards and parameter-server pieces all use the same rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtrain::dist {

struct Range {
  std::size_t begin, end;
  std::size_t size() const { return end - begin; }
};

// Slice j of n over count elements: [count*j/n, count*(j+1)/n). Lengths differ by at most
// one; slices may be empty when count < n.
inline Range slice(std::size_t count, int j, int n) {
  return {count * static_cast<std::size_t>(j) / static_cast<std::size_t>(n),
          count * static_cast<std::size_t>(j + 1) / static_cast<std::size_t>(n)};
}

// The shape an optimizer sees for `length` elements sliced from a parameter of
// `parameter_dims` dimensions (a parameter server's piece, a sharded rank's chunk): [length]
// below two dimensions, else [1, length], so that rules read from shapes (no weight decay on
// biases and norms) hold for a slice as for the whole parameter.
inline std::vector<std::int64_t> slice_shape(std::int64_t length, std::size_t parameter_dims) {
  if (parameter_dims < 2) return {length};
  return {1, length};
}

}  // namespace dtrain::dist
