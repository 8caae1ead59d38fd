#include "comm/collective_record.h"

#include "comm/collective_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace dtrain::dist {
namespace {

// splitmix64's finalizer: every input bit moves about half the output bits, so two
// sequences that differ anywhere end with different fingerprints (but for 2^-64 odds).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t combine(std::uint64_t h, std::int64_t word) { return mix(h ^ static_cast<std::uint64_t>(word)); }

std::string ranks_str(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return fmt::format("rank {}", ranks[0]);
  constexpr std::size_t kShown = 8;
  if (ranks.size() <= kShown) return fmt::format("ranks {}", fmt::join(ranks, ", "));
  return fmt::format("ranks {}, ... ({} ranks)", fmt::join(ranks.begin(), ranks.begin() + kShown, ", "), ranks.size());
}

std::string shape_of(const CollectiveRecord& r) {
  const auto shown = std::min(static_cast<std::size_t>(r.ndim), CollectiveRecord::kShownDims);
  std::string dims =
      fmt::format("{}", fmt::join(r.dims.begin(), r.dims.begin() + static_cast<std::ptrdiff_t>(shown), ", "));
  if (static_cast<std::size_t>(r.ndim) <= CollectiveRecord::kShownDims) return "[" + dims + "]";
  return fmt::format("[{}, ... ({} dims, the rest hashed to {:016x})]", dims, r.ndim,
                     static_cast<std::uint64_t>(r.rest));
}

}  // namespace

const char* collective_op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::AllReduce: return "all_reduce";
    case CollectiveOp::Broadcast: return "broadcast";
    case CollectiveOp::AllGather: return "all_gather";
    case CollectiveOp::ReduceScatter: return "reduce_scatter";
    case CollectiveOp::Barrier: return "barrier";
    case CollectiveOp::Split: return "split";
  }
  return "?";
}

CollectiveRecord CollectiveRecord::call(CollectiveOp op, const Tensor* t, int root, int reduce) {
  CollectiveRecord r;
  r.op = static_cast<std::int64_t>(op);
  r.root = root;
  r.reduce = reduce;
  if (t == nullptr) return r;
  r.dtype = static_cast<std::int64_t>(t->dtype());
  r.ndim = t->dim();
  std::uint64_t rest = 0;
  for (std::size_t d = 0; d < t->shape().size(); ++d) {
    if (d < kShownDims) {
      r.dims[d] = t->shape()[d];
    } else {
      rest = combine(rest, t->shape()[d]);
    }
  }
  r.rest = static_cast<std::int64_t>(rest);
  return r;
}

std::string call_str(const CollectiveRecord& r) {
  std::vector<std::string> args;
  if (r.ndim >= 0) args.push_back(fmt::format("{} {}", dtype_name(static_cast<DType>(r.dtype)), shape_of(r)));
  if (r.reduce >= 0) args.emplace_back(reduce_op_name(static_cast<ReduceOp>(r.reduce)));
  if (r.root >= 0) args.push_back(fmt::format("root {}", r.root));
  return fmt::format("{}({})", collective_op_name(static_cast<CollectiveOp>(r.op)), fmt::join(args, ", "));
}

std::int64_t extend_history(std::int64_t history, const CollectiveRecord& r) {
  CollectiveRecord call = r;
  call.history = 0;
  auto h = static_cast<std::uint64_t>(history);
  for (std::int64_t w : to_words(call)) h = combine(h, w);
  return static_cast<std::int64_t>(h);
}

std::optional<std::string> find_mismatch(const std::vector<CollectiveRecord>& records, const std::string& comm_name) {
  if (std::all_of(records.begin(), records.end(), [&](const CollectiveRecord& r) { return r == records[0]; })) {
    return std::nullopt;
  }
  // Groups of equal records, in the order of their lowest rank.
  std::vector<std::vector<int>> groups;
  for (std::size_t r = 0; r < records.size(); ++r) {
    auto same = std::find_if(groups.begin(), groups.end(), [&](const std::vector<int>& g) {
      return records[static_cast<std::size_t>(g[0])] == records[r];
    });
    if (same != groups.end()) {
      same->push_back(static_cast<int>(r));
    } else {
      groups.push_back({static_cast<int>(r)});
    }
  }
  // Words only for what differs: the sequence numbers and fingerprints agree in any
  // program whose earlier calls all matched.
  auto differ = [&](auto field) {
    return std::any_of(records.begin(), records.end(),
                       [&](const CollectiveRecord& r) { return field(r) != field(records[0]); });
  };
  const bool sequences_differ = differ([](const CollectiveRecord& r) { return r.sequence; });
  const bool histories_differ = differ([](const CollectiveRecord& r) { return r.history; });
  std::vector<std::string> parts;
  for (const std::vector<int>& g : groups) {
    const CollectiveRecord& r = records[static_cast<std::size_t>(g[0])];
    std::string part = fmt::format("{} called {}", ranks_str(g), call_str(r));
    if (sequences_differ) part += fmt::format(" as its call #{}", r.sequence);
    if (histories_differ) {
      part += fmt::format(" after calls fingerprinted {:016x}", static_cast<std::uint64_t>(r.history));
    }
    parts.push_back(std::move(part));
  }
  std::string message =
      fmt::format("collective mismatch at call #{} on communicator '{}': {} but {}", records[0].sequence, comm_name,
                  parts[0], fmt::join(parts.begin() + 1, parts.end(), ", "));
  if (histories_differ) message += " (the ranks' earlier calls on this communicator differ)";
  return message;
}

CollectiveChecker::CollectiveChecker(std::string name, int size) : name_(std::move(name)), size_(size) {}

void CollectiveChecker::check(CollectiveRecord call, const Gather& gather) {
  call.sequence = ++sequence_;
  call.history = history_;
  const RecordWords mine = to_words(call);
  std::vector<std::int64_t> all(static_cast<std::size_t>(size_) * kRecordWords);
  try {
    gather(mine.data(), all.data());
  } catch (const Error& e) {
    DTRAIN_FAIL("checking {} (call #{} on communicator '{}') against the other ranks: {}", call_str(call),
                call.sequence, name_, e.message());
  }
  std::vector<CollectiveRecord> records;
  for (auto rank = all.begin(); rank != all.end(); rank += kRecordWords) {
    RecordWords theirs;
    std::copy(rank, rank + kRecordWords, theirs.begin());
    records.push_back(from_words(theirs));
  }
  // A call that fails the check runs on no rank, so it stays out of the fingerprint, and
  // the calls after it are checked as if it had not been made.
  if (std::optional<std::string> mismatch = find_mismatch(records, name_)) DTRAIN_FAIL("{}", *mismatch);
  history_ = extend_history(history_, call);
}

}  // namespace dtrain::dist
