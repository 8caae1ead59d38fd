// bench_allreduce: all-reduce bandwidth against message size, dtrain's algorithms side by
// side with two peers run in the same process:
//   mpi          MPI_Allreduce, called directly
//   ring         a plain ring (bench_collective_ops.h): reduce-scatter + all-gather, one MPI_Sendrecv
//                of a whole segment per step (the textbook algorithm)
//   dtrain_mpi   dtrain's Communicator forced to AllReduceAlgorithm::Mpi (MPI_Allreduce
//                behind the communication thread: its overhead)
//   dtrain_ring, dtrain_rd, dtrain_rab   dtrain's Ring, RecursiveDoubling, Rabenseifner
//   shm, shm_mpi, shm_rd, shm_rab        SharedMemory: on one host alone; across hosts the
//                hierarchical scheme with the ring, MPI_Allreduce, recursive doubling or
//                Rabenseifner among the hosts' leaders
//   auto         what the collective table chooses (the default)
// --collective reduce_scatter|all_gather|broadcast measures that collective instead (root 0
// for broadcast; the message is reduce_scatter's input, all_gather's output): mpi calls
// MPI_Reduce_scatter_block, MPI_Allgather (in place) or MPI_Bcast directly; dtrain_mpi,
// dtrain_ring, dtrain_rh (recursive halving), dtrain_rd (recursive doubling), dtrain_tree
// (binomial tree), dtrain_chain and shm (SharedMemory: hierarchical across hosts; reduce_scatter's
// there needs hosts of equal size) force those of CollectiveAlgorithm that the
// collective runs; auto reads the table's list for it.
// f32 sums, sizes --min-bytes .. --max-bytes in powers of 4. Each case first runs warm-up
// iterations, then times --iters of them (default: more for small sizes); an iteration's
// time is the slowest rank's, between barriers. busbw = 2(n-1)/n * bytes / time (all-reduce;
// (n-1)/n for reduce-scatter and all-gather, 1 for broadcast), the traffic every rank's link
// carries in a bandwidth-optimal algorithm.
//
//   mpirun -np 2 bench_allreduce [--json] [--max-bytes 268435456] [--iters N] [--impls mpi,shm]
//                                [--repeat 5] [--tune-into TABLE.json] [--table TABLE.json]
//                                [--collective reduce_scatter]
//
// --repeat R runs every (size, impl) R times, alternating the implementations inside each
// repetition, and ends with a summary per size: each implementation's median time over the
// repetitions and the paired ratio (same repetition) of its time to the better of the two
// peers (mpi, ring), median over the repetitions.
// --tune-into FILE measures every dtrain algorithm that applies (5 repetitions unless --repeat
// says otherwise, 4 KB .. 64 MB unless the sizes are given), picks the fastest per size
// (median) and writes the case of this rank and host count into FILE (created, or the case
// replaced in it): a table that DTRAIN_COLLECTIVE_TABLE can name (docs/COLLECTIVES.md). With
// --collective it writes that collective's list into the case, which must exist already
// (tune all_reduce first).
// Hosts are the groups that DTRAIN_HOST_ID gives when it is set (emulated hosts,
// bench/netns), else the ranks that share memory.
//
// Before timing, every implementation is checked against the exact sum at a few sizes.
// The first line (the first JSON object with --json) describes the machine, including the
// memory bandwidth the ranks saw at the start, since the cores may be shared.
#include "dtrain/core/environment.h"
#include "dtrain/comm/collective_table.h"
#include "dtrain/comm/communicator.h"

#include "bench_collective_ops.h"
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
#include <fstream>
#include <functional>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <vector>

namespace {

using namespace dtrain;
using namespace dtrain::bench;

struct Config {
  bool json = false;
  std::size_t min_bytes = 4 << 10;
  std::size_t max_bytes = std::size_t{256} << 20;
  int iters = 0;  // 0: by size
  int repeat = 1;
  std::string tune;  // the table file --tune-into writes
  std::string collective = "all_reduce";
  std::vector<std::string> impls = {"mpi", "ring", "dtrain_mpi", "dtrain_ring", "shm", "auto"};
};

// dtrain's forced algorithms: the bench's name, the algorithm, the leaders' algorithm.
struct Forced {
  const char* name;
  dist::AllReduceAlgorithm algorithm;
  dist::AllReduceAlgorithm leaders;
};
using A = dist::AllReduceAlgorithm;
constexpr Forced kForced[] = {
    {"dtrain_mpi", A::Mpi, A::Auto},
    {"dtrain_ring", A::Ring, A::Auto},
    {"dtrain_rd", A::RecursiveDoubling, A::Auto},
    {"dtrain_rab", A::Rabenseifner, A::Auto},
    {"shm", A::SharedMemory, A::Ring},
    {"shm_mpi", A::SharedMemory, A::Mpi},
    {"shm_rd", A::SharedMemory, A::RecursiveDoubling},
    {"shm_rab", A::SharedMemory, A::Rabenseifner},
    {"auto", A::Auto, A::Auto},
};
// dtrain's forced algorithms of the other collectives (--collective).
struct ForcedCollective {
  const char* name;
  dist::CollectiveAlgorithm algorithm;
};
using C = dist::CollectiveAlgorithm;
constexpr ForcedCollective kForcedCollective[] = {
    {"dtrain_mpi", C::Mpi},
    {"dtrain_ring", C::Ring},
    {"dtrain_rh", C::RecursiveHalving},
    {"dtrain_rd", C::RecursiveDoubling},
    {"dtrain_tree", C::BinomialTree},
    {"dtrain_chain", C::Chain},
    {"shm", C::SharedMemory},
    {"auto", C::Auto},
};
const std::vector<std::string> kAllImpls = {"mpi",        "ring",      "dtrain_mpi",  "dtrain_ring", "dtrain_rd",
                                            "dtrain_rab", "shm",       "shm_mpi",     "shm_rd",      "shm_rab",
                                            "auto",       "dtrain_rh", "dtrain_tree", "dtrain_chain"};

// Host groups as dtrain's communicator forms them: DTRAIN_HOST_ID when it is set (emulated
// hosts), else the ranks that share memory.
// The host count, and whether every host holds the same number of ranks.
struct Hosts {
  int count = 1;
  bool even = true;
};
Hosts count_hosts() {
  MPI_Comm host;
  if (auto id = env::get("DTRAIN_HOST_ID")) {
    MPI_Comm_split(MPI_COMM_WORLD, std::stoi(*id), 0, &host);
  } else {
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  }
  int host_rank = 0, host_size = 1, hosts = 0;
  MPI_Comm_rank(host, &host_rank);
  MPI_Comm_size(host, &host_size);
  int leader = host_rank == 0 ? 1 : 0;
  MPI_Allreduce(&leader, &hosts, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int sizes[2] = {-host_size, host_size};  // the fewest (negated) and the most ranks on a host
  MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Comm_free(&host);
  return {hosts, -sizes[0] == sizes[1]};
}

// Rank r's input: small integers, so every algorithm's sum is exact.
float input_value(int rank, std::size_t i) {
  return static_cast<float>((i * 7 + static_cast<std::size_t>(rank) * 5) % 13);
}

// True on every rank when the implementation computes exact results at each size on every
// rank: sums (all-reduce, reduce-scatter into `out`), every rank's block (all-gather) or
// rank 0's message (broadcast).
bool validate(const Operation& run, const std::optional<dist::TunedCollective>& which, int rank, int size,
              const Tensor& out) {
  using TC = dist::TunedCollective;
  auto sum = [size](std::size_t i) {
    float want = 0;
    for (int r = 0; r < size; ++r) want += input_value(r, i);
    return want;
  };
  bool ok = true;
  for (std::int64_t count : {1, 7, 1'000'003}) {
    if (which) count *= size;  // whole blocks
    Tensor t = Tensor::empty({count});
    float* p = t.data<float>();
    for (std::int64_t i = 0; i < count; ++i) p[i] = input_value(rank, static_cast<std::size_t>(i));
    run(t);
    const auto block = static_cast<std::size_t>(count / size);
    if (which == TC::ReduceScatter) {
      const float* o = out.data<float>();
      for (std::size_t i = 0; i < block && ok; ++i) ok = o[i] == sum(static_cast<std::size_t>(rank) * block + i);
      continue;
    }
    for (std::int64_t i = 0; i < count && ok; ++i) {
      const auto at = static_cast<std::size_t>(i);
      const float want = !which                   ? sum(at)
                         : which == TC::AllGather ? input_value(static_cast<int>(at / block), at)
                                                  : input_value(0, at);
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
Timing time_case(const Operation& run, Tensor& data, int iters) {
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

// Per size: each implementation's median over the repetitions, and its paired ratio to the
// better peer (mpi or ring, whichever ran) in the same repetition, median over them.
void print_summary(const Config& c, const std::vector<std::size_t>& sizes,
                   const std::map<std::pair<std::size_t, std::string>, std::vector<double>>& times, int ranks,
                   int hosts);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The algorithm names --tune-into writes for the bench's names.
std::string table_name(const std::string& impl) {
  for (const Forced& f : kForced) {
    if (impl == f.name) {
      dist::AllReduceChoice choice{f.algorithm, f.leaders == A::Auto ? A::Ring : f.leaders};
      return dist::choice_name(choice);
    }
  }
  DTRAIN_FAIL("bench_allreduce: {} is not one of dtrain's algorithms", impl);
}

// Within this share of the fastest median, a size counts as a tie (the repetitions' spread
// on these shared machines is larger).
constexpr double kTie = 0.03;

// Ties go to the earlier of these: the shared-memory scheme, dtrain's point-to-point
// algorithms, MPI_Allreduce last. dtrain's waits back off to sleeping while MPI's poll a
// core, which an isolated timing does not charge but a step that overlaps the all-reduce
// with backward pays for in compute.
int tie_rank(const std::string& impl) {
  static const std::vector<std::string> order = {"shm",          "shm_rab",     "shm_rd",    "shm_mpi",
                                                 "dtrain_rab",   "dtrain_ring", "dtrain_rd", "dtrain_rh",
                                                 "dtrain_chain", "dtrain_tree", "dtrain_mpi"};
  auto it = std::find(order.begin(), order.end(), impl);
  return static_cast<int>(it - order.begin());
}

// The fastest implementation per size (median over the repetitions; ties as above), as a
// table list: neighbouring sizes with the same winner merge; a boundary sits at the
// geometric mean of the last size of one winner and the first of the next. Each step is
// (up_to_bytes, the winner's bench name).
using Winners = std::vector<std::pair<std::optional<std::uint64_t>, std::string>>;
Winners tuned_steps(const std::vector<std::size_t>& sizes, const std::vector<std::string>& impls,
                    const std::map<std::pair<std::size_t, std::string>, std::vector<double>>& times) {
  std::vector<std::string> winners;
  for (std::size_t bytes : sizes) {
    double fastest = median(times.at({bytes, impls.front()}));
    for (const std::string& impl : impls) fastest = std::min(fastest, median(times.at({bytes, impl})));
    std::string best;
    for (const std::string& impl : impls) {
      if (median(times.at({bytes, impl})) > fastest * (1 + kTie)) continue;
      if (best.empty() || tie_rank(impl) < tie_rank(best)) best = impl;
    }
    winners.push_back(best);
  }
  Winners steps;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i + 1 < sizes.size() && winners[i + 1] == winners[i]) continue;
    std::optional<std::uint64_t> bound;
    if (i + 1 < sizes.size()) bound = static_cast<std::uint64_t>(std::sqrt(double(sizes[i]) * double(sizes[i + 1])));
    steps.emplace_back(bound, winners[i]);
  }
  return steps;
}

// The case's note with `which`'s part ("; <collective>: ..." up to the next collective's part)
// replaced by `measured`, so that retuning a collective does not pile up notes.
std::string with_note(std::string note, dist::TunedCollective which, const std::string& measured) {
  auto marker = [](dist::TunedCollective c) { return fmt::format("; {}: ", dist::collective_name(c)); };
  if (const std::size_t at = note.find(marker(which)); at != std::string::npos) {
    std::size_t end = std::string::npos;
    for (dist::TunedCollective other : dist::kTunedCollectives) end = std::min(end, note.find(marker(other), at + 1));
    note.erase(at, end == std::string::npos ? std::string::npos : end - at);
  }
  return note + marker(which) + measured;
}

// Writes the tuned list into the table file: all_reduce's replaces the case of (ranks,
// hosts) whole; another collective's goes into that case, which must exist. Returns the
// list as text.
std::string write_tuned(const std::string& path, const std::optional<dist::TunedCollective>& which,
                        const Winners& steps, int ranks, int hosts, const std::string& measured) {
  dist::CollectiveTable table;
  if (std::filesystem::exists(path)) table = dist::CollectiveTable::read(path);
  std::string text;
  for (const auto& [bound, impl] : steps) {
    text += bound ? fmt::format("{} up to {} B, ", impl, *bound) : fmt::format("{} above", impl);
  }
  if (!which) {
    dist::CollectiveTable::Case c{hosts, ranks, measured, {}, {}};
    for (const auto& [bound, impl] : steps) c.choices.push_back({bound, dist::parse_choice(table_name(impl), path)});
    if (const dist::CollectiveTable::Case* old = table.find(ranks, hosts);
        old != nullptr && old->ranks == ranks && old->hosts == hosts) {
      for (dist::TunedCollective other : dist::kTunedCollectives) c.steps(other) = old->steps(other);  // kept
    }
    table.put(c);
  } else {
    const dist::CollectiveTable::Case* found = table.find(ranks, hosts);
    DTRAIN_CHECK(found != nullptr && found->ranks == ranks && found->hosts == hosts,
                 "bench_allreduce: {} has no case of {} ranks on {} host(s): tune all_reduce into it first", path,
                 ranks, hosts);
    dist::CollectiveTable::Case c = *found;
    c.steps(*which).clear();
    for (const auto& [bound, impl] : steps) {
      const auto* f = std::find_if(std::begin(kForcedCollective), std::end(kForcedCollective),
                                   [&](const ForcedCollective& x) { return impl == x.name; });
      c.steps(*which).push_back({bound, f->algorithm});
    }
    c.measured = with_note(c.measured, *which, measured);
    table.put(c);
  }
  std::ofstream(path) << table.to_json();
  return text;
}

int run(Config c) {
  dist::CommunicatorPtr world = dist::world();
  DTRAIN_CHECK(world->backend() == "mpi", "bench_allreduce: run it under mpirun (got the {} communicator)",
               world->backend());
  const int rank = world->rank(), size = world->size();
  const Hosts layout = count_hosts();
  const int hosts = layout.count;
  const std::optional<dist::TunedCollective> which = tuned_collective(c.collective);
  if (!c.tune.empty() && which) {
    c.impls = {"dtrain_mpi"};
    for (const ForcedCollective& f : kForcedCollective) {
      if (f.algorithm == C::Mpi || f.algorithm == C::Auto || !dist::runs(*which, f.algorithm)) continue;
      // shm needs ranks that share a host; reduce_scatter's across hosts, hosts of equal size.
      if (f.algorithm == C::SharedMemory &&
          (hosts == size || (*which == dist::TunedCollective::ReduceScatter && !layout.even)))
        continue;
      c.impls.push_back(f.name);
    }
  } else if (!c.tune.empty()) {
    // Every dtrain algorithm that means something here. With one rank per host the
    // hierarchical scheme is its leaders' algorithm alone, so it is left out there; the
    // leaders' variants need several hosts.
    c.impls = {"dtrain_mpi", "dtrain_ring", "dtrain_rd", "dtrain_rab"};
    if (hosts < size) c.impls.push_back("shm");
    if (hosts > 1 && hosts < size) c.impls.insert(c.impls.end(), {"shm_mpi", "shm_rd", "shm_rab"});
  }

  MPI_Comm peer_comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &peer_comm);
  PlainRing plain_ring(peer_comm);
  Tensor out = Tensor::zeros({static_cast<std::int64_t>(c.max_bytes / 4 / static_cast<std::size_t>(size)) + 1'000'003});
  std::map<std::string, Operation> impls;
  if (which) {
    impls["mpi"] = mpi_collective(*which, peer_comm, size, out);
    for (const ForcedCollective& f : kForcedCollective) {
      if (std::find(c.impls.begin(), c.impls.end(), f.name) == c.impls.end()) continue;
      DTRAIN_CHECK(f.algorithm == C::Auto || dist::runs(*which, f.algorithm), "bench_allreduce: {} does not run {}",
                   c.collective, f.name);
      dist::CommunicatorOptions options;
      (*which == dist::TunedCollective::ReduceScatter ? options.reduce_scatter
       : *which == dist::TunedCollective::AllGather   ? options.all_gather
                                                      : options.broadcast) = f.algorithm;
      impls[f.name] = dtrain_collective(*which, dist::world(options), out);
    }
  } else {
    impls["mpi"] = [&](Tensor& t) {
      MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM, peer_comm);
    };
    impls["ring"] = [&](Tensor& t) { plain_ring(t); };
    for (const Forced& f : kForced) {
      if (std::find(c.impls.begin(), c.impls.end(), f.name) == c.impls.end()) continue;
      dist::CommunicatorPtr comm = dist::world({.all_reduce = f.algorithm, .leaders_all_reduce = f.leaders});
      impls[f.name] = [comm](Tensor& t) { comm->all_reduce(t); };
    }
  }

  for (const std::string& name : c.impls) {
    DTRAIN_CHECK(impls.count(name), "bench_allreduce: {} has no implementation '{}'", c.collective, name);
    DTRAIN_CHECK(validate(impls[name], which, rank, size, out), "bench_allreduce: {} computed a wrong {}", name,
                 c.collective);
  }

  std::time_t now = std::time(nullptr);
  std::string machine = fmt::format(
      "{} rank(s) on {} host(s); nproc {}; {}; memcpy {:.1f} GB/s per rank (64 MB, all ranks at once); {:%Y-%m-%d "
      "%H:%M}",
      size, hosts, env::hardware_threads(), bench::cpu_model(), memcpy_gbps(), fmt::localtime(now));
  if (rank == 0) {
    if (c.json) {
      fmt::print("{}\n", nlohmann::ordered_json{{"bench", record_name(which)}, {"machine", machine}}.dump());
    } else {
      fmt::print("bench_allreduce: {}, f32{}; {}\n", c.collective,
                 which == dist::TunedCollective::Broadcast ? "" : " sum", machine);
      fmt::print("{:>11} {:<12}{:>12}{:>12}{:>12}{:>8}{:>12}{:>12}\n", "bytes", "impl", "median us", "min us", "max us",
                 "iters", "algbw GB/s", "busbw GB/s");
    }
  }
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = c.min_bytes; bytes <= c.max_bytes; bytes *= 4) sizes.push_back(bytes);
  std::map<std::pair<std::size_t, std::string>, std::vector<double>> times;     // rank 0's record, per repetition
  Tensor buffer = Tensor::zeros({static_cast<std::int64_t>(c.max_bytes / 4)});  // zeros: sums stay finite
  for (int rep = 0; rep < c.repeat; ++rep) {
    for (std::size_t bytes : sizes) {
      Tensor data = buffer.narrow(0, 0, static_cast<std::int64_t>(bytes / 4));
      int iters =
          c.iters > 0 ? c.iters : static_cast<int>(std::clamp<std::size_t>((std::size_t{1} << 30) / bytes, 5, 200));
      for (const std::string& name : c.impls) {
        Timing t = time_case(impls[name], data, iters);
        times[{bytes, name}].push_back(t.median_us);
        double algbw = static_cast<double>(bytes) / t.median_us / 1e3;
        const double traffic = !which                                      ? 2.0 * (size - 1) / size
                               : which == dist::TunedCollective::Broadcast ? 1.0
                                                                           : double(size - 1) / size;
        double busbw = algbw * traffic;
        if (rank != 0) continue;
        if (c.json) {
          nlohmann::ordered_json j = {{"bench", record_name(which)},
                                      {"impl", name},
                                      {"ranks", size},
                                      {"hosts", hosts},
                                      {"bytes", bytes},
                                      {"time_us", t.median_us},
                                      {"time_us_min", t.min_us},
                                      {"time_us_max", t.max_us},
                                      {"iters", t.iters},
                                      {"algbw_gbps", algbw},
                                      {"busbw_gbps", busbw}};
          if (c.repeat > 1) j["repetition"] = rep;
          fmt::print("{}\n", j.dump());
        } else {
          fmt::print("{:>11} {:<12}{:>12.1f}{:>12.1f}{:>12.1f}{:>8}{:>12.2f}{:>12.2f}\n", bytes, name, t.median_us,
                     t.min_us, t.max_us, t.iters, algbw, busbw);
        }
      }
      std::fflush(stdout);
    }
  }
  if (rank == 0 && c.repeat > 1) print_summary(c, sizes, times, size, hosts);
  if (rank == 0 && !c.tune.empty()) {
    const std::string measured = fmt::format(
        "bench_allreduce --tune-into: medians of {} repetitions, ties within {:.0f}% to dtrain's own waits; {}",
        c.repeat, kTie * 100, machine);
    const std::string list = write_tuned(c.tune, which, tuned_steps(sizes, c.impls, times), size, hosts, measured);
    fmt::print(c.json ? stderr : stdout, "bench_allreduce: wrote {} of {} ranks on {} host(s) to {}: {}\n",
               c.collective, size, hosts, c.tune, list);
  }
  MPI_Comm_free(&peer_comm);
  return 0;
}

void print_summary(const Config& c, const std::vector<std::size_t>& sizes,
                   const std::map<std::pair<std::size_t, std::string>, std::vector<double>>& times, int ranks,
                   int hosts) {
  std::vector<std::string> peers;
  for (const char* p : {"mpi", "ring"}) {
    if (std::find(c.impls.begin(), c.impls.end(), p) != c.impls.end()) peers.push_back(p);
  }
  if (!c.json) {
    fmt::print("summary over {} repetitions: median us; in brackets the paired ratio to the better of {} (median)\n",
               c.repeat, peers.empty() ? std::string("no peer") : fmt::format("{}", fmt::join(peers, " and ")));
  }
  for (std::size_t bytes : sizes) {
    std::string line = fmt::format("{:>11}", bytes);
    for (const std::string& impl : c.impls) {
      const std::vector<double>& mine = times.at({bytes, impl});
      std::optional<double> ratio;
      if (!peers.empty()) {
        std::vector<double> ratios;
        for (std::size_t r = 0; r < mine.size(); ++r) {
          double best = times.at({bytes, peers[0]})[r];
          for (const std::string& p : peers) best = std::min(best, times.at({bytes, p})[r]);
          ratios.push_back(mine[r] / best);
        }
        ratio = median(ratios);
      }
      if (c.json) {
        nlohmann::ordered_json j = {{"bench", record_name(tuned_collective(c.collective)) + "_summary"},
                                    {"impl", impl},
                                    {"ranks", ranks},
                                    {"hosts", hosts},
                                    {"bytes", bytes},
                                    {"repetitions", c.repeat},
                                    {"time_us_median", median(mine)}};
        if (ratio) j["paired_ratio_to_best_peer"] = *ratio;
        fmt::print("{}\n", j.dump());
      } else {
        line += fmt::format("  {} {:.1f}", impl, median(mine));
        if (ratio) line += fmt::format(" [{:.2f}]", *ratio);
      }
    }
    if (!c.json) fmt::print("{}\n", line);
  }
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
  app.add_option("--impls", config.impls, "implementations to run")->delimiter(',')->check(CLI::IsMember(kAllImpls));
  app.add_option("--repeat", config.repeat, "repetitions of every case, alternating the implementations")
      ->check(CLI::PositiveNumber);
  std::string table;
  app.add_option("--table", table, "the collective table auto reads (sets DTRAIN_COLLECTIVE_TABLE on every rank)")
      ->check(CLI::ExistingFile);
  app.add_option("--collective", config.collective, "the collective to measure")
      ->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather", "broadcast"}));
  app.add_option("--tune-into", config.tune,
                 "measure dtrain's algorithms and write this host shape's case to this table")
      ->excludes("--impls");  // not --tune: mpirun takes that for its own, wherever it is
  CLI11_PARSE(app, argc, argv);
  // Before the first communicator reads it; a flag rather than the variable because mpirun
  // does not pass the environment to ranks on other (emulated) hosts.
  if (!table.empty()) setenv("DTRAIN_COLLECTIVE_TABLE", table.c_str(), 1);
  if (!config.tune.empty()) {
    if (app.count("--repeat") == 0) config.repeat = 5;
    if (app.count("--max-bytes") == 0) config.max_bytes = std::size_t{64} << 20;
  }
  try {
    return run(config);
  } catch (const Error& e) {
    dist::abort_job(e.message());  // ends every rank: one failing alone would leave the others waiting
  } catch (const std::exception& e) {
    dist::abort_job(e.what());
  }
  return 1;  // reached without MPI only
}
