// CommDebugMode: counts the collectives of tensor-parallel layers while it lives, per module,
// kind and pass, with their bytes (as PyTorch's CommDebugMode counts DTensor's). Tests assert
// the design's counts with it; a program prints table() to see where a step communicates.
//
//   dist::CommDebugMode counting;
//   strategy->train_step(micro, optimizer, config);
//   counting.count("1.attn", "all_reduce", "backward");  // 1 under plain tensor parallelism
//
// Each collective is also a trace span (trace.h, phase "communication") named
// "tp <kind> <module>", so the time breakdown and timelines show it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::dist {

struct CollectiveCount {
  std::string module;  // the plan's path of the module the collective belongs to ("3.mlp.c_proj")
  std::string kind;    // "all_reduce", "all_gather", "reduce_scatter"
  std::string pass;    // "forward" or "backward"
  std::int64_t count = 0;
  std::int64_t bytes = 0;  // this rank's input to the collectives (all-gather: its own share)
};

class CommDebugMode {
 public:
  CommDebugMode();  // one at a time per process
  ~CommDebugMode();
  CommDebugMode(const CommDebugMode&) = delete;
  CommDebugMode& operator=(const CommDebugMode&) = delete;

  std::vector<CollectiveCount> counts() const;
  // Collectives whose module, kind and pass match (an empty argument matches all).
  std::int64_t count(std::string_view module = {}, std::string_view kind = {}, std::string_view pass = {}) const;
  std::int64_t bytes(std::string_view module = {}, std::string_view kind = {}, std::string_view pass = {}) const;
  // One line per module, kind and pass: "3.mlp.c_proj  all_reduce  forward  x2  12.0 KiB".
  std::string table() const;
  void reset();
};

namespace detail {
// Called by the tensor-parallel collectives (tensor_parallel_ops.h).
void record_collective(std::string_view module, std::string_view kind, bool backward, std::int64_t bytes);
}  // namespace detail

}  // namespace dtrain::dist
