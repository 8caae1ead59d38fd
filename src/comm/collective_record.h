// Collective-mismatch detection (CommunicatorOptions::check_collectives): the record of
// one collective call that the ranks exchange before issuing it (what was called, on
// what, and where it stands in the communicator's sequence of calls), its words for a
// message, and the CollectiveChecker that numbers, exchanges and compares the records. A
// record is fixed-size and made of 64-bit words, so that any all-gather carries it.
#pragma once

#include "dtrain/comm/communicator.h"

#include <array>
#include <bit>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::dist {

enum class CollectiveOp : std::int64_t { AllReduce = 1, Broadcast, AllGather, ReduceScatter, Barrier, Split };
const char* collective_op_name(CollectiveOp op);

struct CollectiveRecord {
  // Sizes beyond the first kShownDims are compared through a hash (`rest`).
  static constexpr std::size_t kShownDims = 6;

  std::int64_t sequence = 0;                    // 1 for the communicator's first collective
  std::int64_t history = 0;                     // a fingerprint of every earlier call (extend_history)
  std::int64_t op = 0;                          // CollectiveOp
  std::int64_t dtype = -1;                      // DType; -1: no tensor (barrier, split)
  std::int64_t ndim = -1;                       // -1: no tensor
  std::array<std::int64_t, kShownDims> dims{};  // 0 past ndim
  std::int64_t rest = 0;                        // hash of the sizes past kShownDims; 0 when none
  std::int64_t root = -1;                       // broadcast's; -1 otherwise
  std::int64_t reduce = -1;                     // ReduceOp of a reduction; -1 otherwise

  // The call itself, sequence and history left 0. `t` may be null (barrier, split).
  static CollectiveRecord call(CollectiveOp op, const Tensor* t = nullptr, int root = -1, int reduce = -1);

  bool operator==(const CollectiveRecord&) const = default;
};
// Exchanged as raw words: no padding, nothing but int64 fields.
inline constexpr std::size_t kRecordWords = sizeof(CollectiveRecord) / sizeof(std::int64_t);
static_assert(sizeof(CollectiveRecord) == kRecordWords * sizeof(std::int64_t));
using RecordWords = std::array<std::int64_t, kRecordWords>;
inline RecordWords to_words(const CollectiveRecord& r) { return std::bit_cast<RecordWords>(r); }
inline CollectiveRecord from_words(const RecordWords& w) { return std::bit_cast<CollectiveRecord>(w); }

// "all_reduce(f32 [3], sum)", "broadcast(i64 [2, 5], root 0)", "barrier()".
std::string call_str(const CollectiveRecord& r);

// The fingerprint of a sequence of calls extended by `r` (its op, tensor, root, reduce
// and sequence number; its own history is what is extended).
std::int64_t extend_history(std::int64_t history, const CollectiveRecord& r);

// Compares one record per rank (records[r] is rank r's) and, when they are not all equal,
// returns the error every rank reports: "collective mismatch at call #17 on communicator
// 'world': rank 0 called all_reduce(f32 [3], sum) but rank 1 called all_reduce(f32 [4],
// sum)". Ranks with equal records are named together; the message depends only on
// `records`, so every rank words it the same.
std::optional<std::string> find_mismatch(const std::vector<CollectiveRecord>& records, const std::string& comm_name);

// One communicator's checks: its calls' sequence numbers and running fingerprint.
class CollectiveChecker {
 public:
  // All-gathers one record per rank: `mine` (kRecordWords words) into `all` (size() x
  // kRecordWords words, rank r's at r * kRecordWords).
  using Gather = std::function<void(const std::int64_t* mine, std::int64_t* all)>;

  // `name` appears in the messages ("world").
  CollectiveChecker(std::string name, int size);
  const std::string& name() const { return name_; }

  // Stamps `call` with its sequence number and the fingerprint of the calls before it,
  // exchanges it through `gather` and throws find_mismatch's error (the same on every
  // rank). A call that fails keeps its sequence number but stays out of the fingerprint,
  // since no rank runs it. One call at a time, in the order of the collectives on the
  // communicator.
  void check(CollectiveRecord call, const Gather& gather);

 private:
  std::string name_;
  int size_;
  std::int64_t sequence_ = 0;  // calls checked so far
  std::int64_t history_ = 0;   // extend_history over them
};

}  // namespace dtrain::dist
