// How the all-reduce algorithms cut `count` elements into n nearly equal slices.
#pragma once

#include <cstddef>

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

}  // namespace dtrain::dist
