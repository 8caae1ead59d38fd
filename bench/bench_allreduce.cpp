// bench_allreduce: all-reduce bandwidth against message size, dtrain's algorithms side by
// side with two peers run in the same process:
//   mpi          MPI_Allreduce, called directly
//   ring         a plain ring written here: reduce-scatter + all-gather, one MPI_Sendrecv
//                of a whole segment per step (the textbook algorithm)
//   dtrain_mpi   dtrain's Communicator forced to AllReduceAlgorithm::Mpi (MPI_Allreduce
//                behind the communication thread: its overhead)
//   dtrain_ring, shm, auto   dtrain's Ring, SharedMemory and Auto (the default)
// f32 sums, sizes 4 KB .. --max-bytes in powers of 4. Each case first runs warm-up
// iterations, then times --iters of them (default: more for small sizes); an iteration's
// time is the slowest rank's, between barriers. busbw = 2(n-1)/n * bytes / time, the
// traffic every rank's link carries in a bandwidth-optimal algorithm.
//
//   mpirun -np 2 bench_allreduce [--json] [--max-bytes 268435456] [--iters N] [--impls mpi,shm]
//
// Before timing, every implementation is checked against the exact sum at a few sizes.
// The first line (the first JSON object with --json) describes the machine, including the
// memory bandwidth the ranks saw at the start, since the cores may be shared.
#include "dtrain/core/environment.h"
#include "dtrain/dist/comm/communicator.h"

#include "bench_machine.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <mpi.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>

namespace {

using namespace dtrain;

struct Config {
  bool json = false;
  std::size_t min_bytes = 4 << 10;
  std::size_t max_bytes = std::size_t{256} << 20;
  int iters = 0;  // 0: by size
  std::vector<std::string> impls = {"mpi", "ring", "dtrain_mpi", "dtrain_ring", "shm", "auto"};
};

// Sums a contiguous f32 tensor in place across the ranks.
using AllReduce = std::function<void(Tensor& data)>;

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

int count_hosts() {
  MPI_Comm host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  int host_rank = 0, hosts = 0;
  MPI_Comm_rank(host, &host_rank);
  int leader = host_rank == 0 ? 1 : 0;
  MPI_Allreduce(&leader, &hosts, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Comm_free(&host);
  return hosts;
}

// Rank r's input: small integers, so every algorithm's sum is exact.
float input_value(int rank, std::size_t i) {
  return static_cast<float>((i * 7 + static_cast<std::size_t>(rank) * 5) % 13);
}

// True on every rank when the implementation computes exact sums at each size on every rank.
bool validate(const AllReduce& run, int rank, int size) {
  bool ok = true;
  for (std::int64_t count : {1, 7, 1'000'003}) {
    Tensor t = Tensor::empty({count});
    float* p = t.data<float>();
    for (std::int64_t i = 0; i < count; ++i) p[i] = input_value(rank, static_cast<std::size_t>(i));
    run(t);
    for (std::int64_t i = 0; i < count && ok; ++i) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += input_value(r, static_cast<std::size_t>(i));
      ok = p[i] == want;
    }
  }
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

// The machine's memory bandwidth as the ranks see it right now: every rank copies 64 MB at
// the same time; the median of 5 copies, GB/s per rank.
double memcpy_gbps() {
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  std::vector<char> from(kBytes, 1), to(kBytes, 0);
  std::vector<double> times;
  for (int it = 0; it < 6; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), kBytes);
    if (it > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return static_cast<double>(kBytes) / times[times.size() / 2] / 1e9;
}

struct Timing {
  double median_us, min_us, max_us;
  int iters;
};

// Each iteration's time is the slowest rank's; barriers keep the ranks in step.
Timing time_case(const AllReduce& run, Tensor& data, int iters) {
  const int warmup = data.nbytes() >= (std::size_t{64} << 20) ? 1 : 3;
  std::vector<double> times;
  for (int it = 0; it < warmup + iters; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = std::chrono::steady_clock::now();
    run(data);
    double mine = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    double slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (it >= warmup) times.push_back(slowest);
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front(), times.back(), iters};
}

int run(const Config& c) {
  dist::CommunicatorPtr world = dist::world();
  DTRAIN_CHECK(world->backend() == "mpi", "bench_allreduce: run it under mpirun (got the {} communicator)",
               world->backend());
  const int rank = world->rank(), size = world->size();

  MPI_Comm peer_comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &peer_comm);
  PlainRing plain_ring(peer_comm);
  std::map<std::string, dist::CommunicatorPtr> comms;
  for (auto [name, algorithm] : {std::pair{"dtrain_mpi", dist::AllReduceAlgorithm::Mpi},
                                 {"dtrain_ring", dist::AllReduceAlgorithm::Ring},
                                 {"shm", dist::AllReduceAlgorithm::SharedMemory},
                                 {"auto", dist::AllReduceAlgorithm::Auto}}) {
    comms[name] = dist::world({.all_reduce = algorithm});
  }
  std::map<std::string, AllReduce> impls = {{"mpi",
                                             [&](Tensor& t) {
                                               MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(t.numel()),
                                                             MPI_FLOAT, MPI_SUM, peer_comm);
                                             }},
                                            {"ring", [&](Tensor& t) { plain_ring(t); }}};
  for (auto& [name, comm] : comms) impls[name] = [comm](Tensor& t) { comm->all_reduce(t); };

  for (const std::string& name : c.impls) {
    DTRAIN_CHECK(impls.count(name), "bench_allreduce: unknown implementation '{}'", name);
    DTRAIN_CHECK(validate(impls[name], rank, size), "bench_allreduce: {} computed a wrong sum", name);
  }

  std::time_t now = std::time(nullptr);
  std::string machine = fmt::format(
      "{} rank(s) on {} host(s); nproc {}; {}; memcpy {:.1f} GB/s per rank (64 MB, all ranks at once); {:%Y-%m-%d "
      "%H:%M}",
      size, count_hosts(), env::hardware_threads(), bench::cpu_model(), memcpy_gbps(), fmt::localtime(now));
  if (rank == 0) {
    if (c.json) {
      fmt::print("{}\n", nlohmann::ordered_json{{"bench", "allreduce"}, {"machine", machine}}.dump());
    } else {
      fmt::print("bench_allreduce: f32 sum; {}\n", machine);
      fmt::print("{:>11} {:<12}{:>12}{:>12}{:>12}{:>8}{:>12}{:>12}\n", "bytes", "impl", "median us", "min us", "max us",
                 "iters", "algbw GB/s", "busbw GB/s");
    }
  }
  Tensor buffer = Tensor::zeros({static_cast<std::int64_t>(c.max_bytes / 4)});  // zeros: sums stay finite
  for (std::size_t bytes = c.min_bytes; bytes <= c.max_bytes; bytes *= 4) {
    Tensor data = buffer.narrow(0, 0, static_cast<std::int64_t>(bytes / 4));
    int iters =
        c.iters > 0 ? c.iters : static_cast<int>(std::clamp<std::size_t>((std::size_t{1} << 30) / bytes, 5, 200));
    for (const std::string& name : c.impls) {
      Timing t = time_case(impls[name], data, iters);
      double algbw = static_cast<double>(bytes) / t.median_us / 1e3;
      double busbw = algbw * 2.0 * (size - 1) / size;
      if (rank != 0) continue;
      if (c.json) {
        nlohmann::ordered_json j = {{"bench", "allreduce"},    {"impl", name},           {"ranks", size},
                                    {"bytes", bytes},          {"time_us", t.median_us}, {"time_us_min", t.min_us},
                                    {"time_us_max", t.max_us}, {"iters", t.iters},       {"algbw_gbps", algbw},
                                    {"busbw_gbps", busbw}};
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("{:>11} {:<12}{:>12.1f}{:>12.1f}{:>12.1f}{:>8}{:>12.2f}{:>12.2f}\n", bytes, name, t.median_us,
                   t.min_us, t.max_us, t.iters, algbw, busbw);
      }
    }
    std::fflush(stdout);
  }
  MPI_Comm_free(&peer_comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  CLI::App app{"All-reduce bandwidth of dtrain's algorithms against MPI_Allreduce and a plain ring"};
  app.add_flag("--json", config.json, "one JSON object per (impl, bytes) instead of a table");
  app.add_option("--min-bytes", config.min_bytes, "smallest message")
      ->check(CLI::Range(std::size_t{4}, std::size_t{1} << 32));  // MPI counts are ints
  app.add_option("--max-bytes", config.max_bytes, "largest message")
      ->check(CLI::Range(std::size_t{4}, std::size_t{1} << 32));  // MPI counts are ints
  app.add_option("--iters", config.iters, "timed iterations per case (default: 5..200 by size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--impls", config.impls, "implementations to run")
      ->delimiter(',')
      ->check(CLI::IsMember({"mpi", "ring", "dtrain_mpi", "dtrain_ring", "shm", "auto"}));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(config);
  } catch (const Error& e) {
    dist::abort_job(e.message());  // ends every rank: one failing alone would leave the others waiting
  } catch (const std::exception& e) {
    dist::abort_job(e.what());
  }
  return 1;  // reached without MPI only
}
