// The operations bench_allreduce times: each collective through dtrain's communicator and
// through MPI's own call, and the textbook ring it compares the all-reduce with.
#pragma once

#include "dtrain/comm/collective_table.h"
#include "dtrain/comm/communicator.h"

#include <mpi.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::bench {

// One call of the measured collective on a contiguous f32 message: sums it in place across
// the ranks (all-reduce); reduces its blocks into the bench's output buffer (reduce-scatter);
// gathers every rank's block of it in place (all-gather); or sends rank 0's to all.
using Operation = std::function<void(Tensor& data)>;

// The collective --collective names, or none for all_reduce.
inline std::optional<dist::TunedCollective> tuned_collective(const std::string& name) {
  for (dist::TunedCollective c : dist::kTunedCollectives) {
    if (name == dist::collective_name(c)) return c;
  }
  return std::nullopt;
}

// The JSON lines' "bench": "allreduce" (what bench/model reads) or the collective's name.
inline std::string record_name(const std::optional<dist::TunedCollective>& which) {
  return which ? dist::collective_name(*which) : "allreduce";
}

// The message as reduce_scatter's input or all_gather's output: `ranks` equal blocks.
inline Tensor as_blocks(Tensor& data, int ranks) {
  const std::int64_t block = data.numel() / ranks;
  return data.narrow(0, 0, block * ranks).reshape({ranks, block});
}

// dtrain's collective `which` through `comm`; reduce_scatter writes into `out`.
// The views a collective takes are made once per message (data pointer and size), outside
// the timed calls, as the peer's pointers are: views are the tensor library's cost, not the
// communicator's.
class MessageViews {
 public:
  // The (whole, part) views of `t`, made by `make` the first time.
  template <class Make>
  std::pair<Tensor, Tensor>& of(Tensor& t, Make make) {
    std::pair<Tensor, Tensor>& v = views_[{t.raw_data(), t.numel()}];
    if (!v.first.defined()) v = make(t);
    return v;
  }

 private:
  std::map<std::pair<void*, std::int64_t>, std::pair<Tensor, Tensor>> views_;
};

inline Operation dtrain_collective(dist::TunedCollective which, const dist::CommunicatorPtr& comm, Tensor& out) {
  auto views = std::make_shared<MessageViews>();
  switch (which) {
    case dist::TunedCollective::ReduceScatter:
      return [comm, &out, views](Tensor& t) {
        auto& [in, mine] = views->of(t, [&](Tensor& m) {
          Tensor blocks = as_blocks(m, comm->size());
          return std::pair{blocks, out.narrow(0, 0, blocks.shape()[1])};
        });
        comm->reduce_scatter(in, mine);
      };
    case dist::TunedCollective::AllGather:
      return [comm, views](Tensor& t) {
        auto& [all, mine] = views->of(t, [&](Tensor& m) {
          Tensor blocks = as_blocks(m, comm->size());
          return std::pair{blocks, blocks.select(0, comm->rank())};
        });
        comm->all_gather(mine, all);
      };
    case dist::TunedCollective::Broadcast: return [comm](Tensor& t) { comm->broadcast(t, 0); };
  }
  return {};
}

// The same through MPI's own collective, called directly.
inline Operation mpi_collective(dist::TunedCollective which, MPI_Comm comm, int ranks, Tensor& out) {
  switch (which) {
    case dist::TunedCollective::ReduceScatter:
      return [comm, ranks, &out](Tensor& t) {
        MPI_Reduce_scatter_block(t.raw_data(), out.raw_data(), static_cast<int>(t.numel() / ranks), MPI_FLOAT, MPI_SUM,
                                 comm);
      };
    case dist::TunedCollective::AllGather:
      return [comm, ranks](Tensor& t) {
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t.raw_data(), static_cast<int>(t.numel() / ranks), MPI_FLOAT,
                      comm);
      };
    case dist::TunedCollective::Broadcast:
      return [comm](Tensor& t) { MPI_Bcast(t.raw_data(), static_cast<int>(t.numel()), MPI_FLOAT, 0, comm); };
  }
  return {};
}

// The textbook ring: n-1 reduce-scatter steps then n-1 all-gather steps, each one blocking
// MPI_Sendrecv of a whole segment with the neighbours.
class PlainRing {
 public:
  explicit PlainRing(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
  }
  void operator()(Tensor& t) {
    const int n = size_;
    float* data = t.data<float>();
    const auto count = static_cast<std::size_t>(t.numel());
    auto begin = [&](int j) { return count * static_cast<std::size_t>((j % n + n) % n) / n; };
    auto length = [&](int j) { return count * static_cast<std::size_t>((j % n + n) % n + 1) / n - begin(j); };
    const int right = (rank_ + 1) % n, left = (rank_ + n - 1) % n;
    scratch_.resize(count / n + 1);
    for (int s = 0; s < n - 1; ++s) {
      int out = rank_ - s, in = rank_ - s - 1;
      MPI_Sendrecv(data + begin(out), static_cast<int>(length(out)), MPI_FLOAT, right, 0, scratch_.data(),
                   static_cast<int>(length(in)), MPI_FLOAT, left, 0, comm_, MPI_STATUS_IGNORE);
      float* dst = data + begin(in);
      for (std::size_t i = 0, m = length(in); i < m; ++i) dst[i] += scratch_[i];
    }
    for (int s = 0; s < n - 1; ++s) {
      int out = rank_ + 1 - s, in = rank_ - s;
      MPI_Sendrecv(data + begin(out), static_cast<int>(length(out)), MPI_FLOAT, right, 0, data + begin(in),
                   static_cast<int>(length(in)), MPI_FLOAT, left, 0, comm_, MPI_STATUS_IGNORE);
    }
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<float> scratch_;
};

}  // namespace dtrain::bench
