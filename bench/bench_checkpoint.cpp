// bench_checkpoint: how fast train::Checkpointer saves and loads ResNet-50 with its SGD
// momentum state (about 205 MB in two safetensors files), against the disk's own speed
// measured in the same run, and how long an asynchronous save holds up training. One
// process (LocalStrategy), CPU.
//
//   bench_checkpoint [--dir /tmp] [--reps 5] [--steps 8] [--batch 2] [--image 32] [--cold] [--json]
//
// The model trains a few steps on one tiny synthetic batch first, so that every momentum
// buffer exists. Then each repetition runs, in this order:
//   disk write  write + fsync + close of a file of the checkpoint's size, from memory
//               (random bytes) in 8 MB writes: the disk's sequential write speed;
//   disk read   that file read back in 8 MB reads after dropping it from the page cache
//               (posix_fadvise DONTNEED: no root needed), then removed;
//   save        save() with async = false: snapshot, both files, the records, fsyncs and
//               the commit; GB/s = the two files' bytes / the time save() took;
//   load cold   restore() into a freshly built model and optimizer after dropping the
//               checkpoint's files from the page cache (what is still cached is printed):
//               reads, checksums, parsing and the copies into the tensors;
//   load warm   the same with the files in the page cache, as right after a save; the
//               loaded state is checked to be bit-identical to the saved one;
//   steps       --steps training steps without a save, each timed;
//   async save  save() with async = true, then training steps until the background write
//               is done: the time save() held the caller (SaveTimes::held_s) against the
//               write's (write_s, slowed by the steps beside it) and against the sync
//               save's write, and how much longer those steps took than as many steps
//               without a save (the writer thread shares the machine's cores with them).
// Each timed write (the disk's and the saves') follows an untimed write of as many bytes to
// a scratch file that is then removed (prewarm_page_cache says why; --cold skips it).
// Then medians (min-max) over the repetitions, each repetition's values, and the issue's
// targets: save >= 70% of the disk's write speed; held_s < 10% of write_s.
#include "dtrain/checkpoint/store.h"
#include "dtrain/core/error.h"
#include "dtrain/core/parallel.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/checkpointer.h"

#include "bench_models.h"
#include "bench_stats.h"

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>

namespace {

using namespace dtrain;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kChunk = 8 << 20;  // bytes per write and read of the disk baseline
constexpr int kMaxStepsDuringSave = 10000;  // a write that never ends is an error, not a hang

struct Config {
  std::string dir = "/tmp";
  int reps = 5;
  int steps = 8;
  int warmup = 2;
  std::int64_t batch = 2;
  int image = 32;
  int threads = env::hardware_threads();
  bool cold = false;  // no prewarm_page_cache before the timed writes
  bool json = false;
};

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// ---- the machine and the disk ------------------------------------------------------------

// "ext4 on /dev/vda, mounted at /": the mount holding `dir` (the longest mount point that
// is a prefix of it; a later mount over the same point wins).
std::string filesystem_of(const fs::path& dir) {
  const std::string path = fs::canonical(dir).string();
  std::ifstream in("/proc/self/mounts");
  std::string device, mount, type, found = "unknown filesystem";
  std::size_t longest = 0;
  while (in >> device >> mount >> type) {
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    const bool holds = mount == "/" || path == mount || path.rfind(mount + "/", 0) == 0;
    if (holds && mount.size() >= longest) {
      longest = mount.size();
      found = fmt::format("{} on {}, mounted at {}", type, device, mount);
    }
  }
  return found;
}

std::string kernel() {
  utsname u{};
  return uname(&u) == 0 ? fmt::format("{} {}", u.sysname, u.release) : "unknown kernel";
}

double memory_gb() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  in >> key >> kb;  // "MemTotal: N kB"
  return kb * 1024 / 1e9;
}

int open_or_fail(const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  DTRAIN_CHECK(fd >= 0, "bench_checkpoint: cannot open {}: {}", path.string(), std::strerror(errno));
  return fd;
}

// Drops the file's pages from the page cache (they are clean: written and fsynced).
void drop_from_cache(const fs::path& path) {
  const int fd = open_or_fail(path, O_RDONLY);
  const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  DTRAIN_CHECK(rc == 0, "bench_checkpoint: posix_fadvise(DONTNEED) on {}: {}", path.string(), std::strerror(rc));
}

struct Residency {
  std::uint64_t resident = 0, pages = 0;
};

// How many of the file's pages are in the page cache (mincore over a read-only mapping).
Residency residency(const fs::path& path) {
  const int fd = open_or_fail(path, O_RDONLY);
  struct stat st {};
  DTRAIN_CHECK(::fstat(fd, &st) == 0, "bench_checkpoint: fstat {}: {}", path.string(), std::strerror(errno));
  const auto size = static_cast<std::size_t>(st.st_size);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  Residency r{.resident = 0, .pages = (size + page - 1) / page};
  if (size > 0) {
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    DTRAIN_CHECK(map != MAP_FAILED, "bench_checkpoint: mmap {}: {}", path.string(), std::strerror(errno));
    std::vector<unsigned char> in_core(r.pages);
    const int rc = ::mincore(map, size, in_core.data());
    const int code = errno;
    ::munmap(map, size);
    DTRAIN_CHECK(rc == 0, "bench_checkpoint: mincore {}: {}", path.string(), std::strerror(code));
    for (unsigned char v : in_core) r.resident += v & 1;
  }
  ::close(fd);
  return r;
}

// Drops every file of the checkpoint `dir` from the page cache; returns the fraction of
// their pages still cached afterwards.
double drop_checkpoint_from_cache(const fs::path& dir) {
  Residency total;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    drop_from_cache(entry.path());
    const Residency r = residency(entry.path());
    total.resident += r.resident;
    total.pages += r.pages;
  }
  return total.pages == 0 ? 0.0 : static_cast<double>(total.resident) / static_cast<double>(total.pages);
}

// Removes `path`, then commits the file system's journal (syncfs), so that the work the
// removal leaves (on a file system mounted with `discard`, discarding the freed blocks)
// is done before the next measurement instead of during it.
void remove_and_settle(const fs::path& path) {
  fs::remove_all(path);
  const int fd = open_or_fail(path.parent_path(), O_RDONLY | O_DIRECTORY);
  const int rc = ::syncfs(fd);
  const int code = errno;
  ::close(fd);
  DTRAIN_CHECK(rc == 0, "bench_checkpoint: syncfs on {}: {}", path.parent_path().string(), std::strerror(code));
}

// An untimed write of `data` to `path` (no fsync), then its removal, which drops the
// pages unwritten: the timed write that follows gets page-cache memory the guest has just
// used. Without it, on a VM that hands free memory back to its host (virtio-balloon free
// page reporting, as on the machine of bench/results/checkpoint.txt), the first big write
// after a pause pays for faulting that memory back in (up to 1 s for 200 MB there), and
// whichever measurement came first in a repetition was the slow one.
void prewarm_page_cache(const fs::path& path, const std::vector<std::uint8_t>& data) {
  const int fd = open_or_fail(path, O_WRONLY | O_CREAT | O_TRUNC);
  for (std::size_t at = 0; at < data.size();) {
    const ssize_t n = ::write(fd, data.data() + at, std::min(kChunk, data.size() - at));
    if (n < 0 && errno == EINTR) continue;
    DTRAIN_CHECK(n > 0, "bench_checkpoint: writing {}: {}", path.string(), std::strerror(n < 0 ? errno : ENOSPC));
    at += static_cast<std::size_t>(n);
  }
  ::close(fd);
  fs::remove(path);
}

struct DiskTimes {
  double write_s, fsync_s, read_s;
};

// Write + fsync + close of `data` to `path` in kChunk writes, then a read of it in kChunk
// reads after dropping it from the page cache; the file is removed after.
DiskTimes disk_baseline(const fs::path& path, std::vector<std::uint8_t>& data) {
  auto start = Clock::now();
  int fd = open_or_fail(path, O_WRONLY | O_CREAT | O_TRUNC);
  for (std::size_t at = 0; at < data.size();) {
    const ssize_t n = ::write(fd, data.data() + at, std::min(kChunk, data.size() - at));
    if (n < 0 && errno == EINTR) continue;
    DTRAIN_CHECK(n > 0, "bench_checkpoint: writing {}: {}", path.string(), std::strerror(n < 0 ? errno : ENOSPC));
    at += static_cast<std::size_t>(n);
  }
  const auto synced = Clock::now();
  DTRAIN_CHECK(::fsync(fd) == 0, "bench_checkpoint: fsync {}: {}", path.string(), std::strerror(errno));
  DTRAIN_CHECK(::close(fd) == 0, "bench_checkpoint: closing {}: {}", path.string(), std::strerror(errno));
  const double write_s = since(start), fsync_s = since(synced);

  drop_from_cache(path);
  start = Clock::now();
  fd = open_or_fail(path, O_RDONLY);
  for (std::size_t at = 0; at < data.size();) {
    const ssize_t n = ::read(fd, data.data() + at, std::min(kChunk, data.size() - at));
    if (n < 0 && errno == EINTR) continue;
    DTRAIN_CHECK(n > 0, "bench_checkpoint: reading {}: {}", path.string(),
                 n < 0 ? std::strerror(errno) : "end of file");
    at += static_cast<std::size_t>(n);
  }
  ::close(fd);
  const double read_s = since(start);
  remove_and_settle(path);
  return {write_s, fsync_s, read_s};
}

// ---- training and checkpoints ----------------------------------------------------------

const optim::SgdOptions kSgd{.lr = 0.01, .momentum = 0.9};

bench::BenchModel resnet50(const Config& c) {
  return {nn::resnet(50, 1000, nn::ResNetStem::ImageNet), {3, c.image, c.image}, 1000};
}

struct Training {
  dist::LocalStrategy strategy;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::SGD> optimizer;
  optim::LossScaler scaler{{.enabled = false}};  // fp32, as the Trainer runs it
  std::array<dist::MicroBatch, 1> batch;
  dist::StepConfig step_config{.loss = [](const Variable& out, const Tensor& y) { return cross_entropy(out, y); }};
  std::int64_t global_step = 0;

  explicit Training(const Config& c) {
    bench::BenchModel m = resnet50(c);
    model = strategy.prepare(m.model);
    model->train();
    optimizer = std::make_unique<optim::SGD>(model->parameters(), kSgd);
    const auto [x, y] = bench::synthetic_batch(m, c.batch, 100);
    batch[0] = {x, y};
  }

  double step() {
    const auto start = Clock::now();
    strategy.train_step(batch, *optimizer, step_config);
    ++global_step;
    return since(start);
  }

  void save(train::Checkpointer& checkpointer) const {
    // One long epoch of the fixed batch: a position restore() accepts.
    const checkpoint::TrainingPosition position{.global_step = global_step,
                                                .epoch = 1,
                                                .step_in_epoch = global_step,
                                                .updates_per_epoch = 1'000'000'000,
                                                .epochs = 1,
                                                .batch_size = batch[0].inputs.size(0)};
    checkpointer.save(*optimizer, scaler, position, {},
                      fmt::format("{} ({} parameters)", model->describe(), model->num_parameters()));
  }
};

void check_identical(const std::string& what, const optim::NamedTensors& saved, const optim::NamedTensors& loaded) {
  std::map<std::string, Tensor> by_name(loaded.begin(), loaded.end());
  DTRAIN_CHECK(by_name.size() == saved.size(), "bench_checkpoint: the loaded {} has {} tensors, the saved {}", what,
               by_name.size(), saved.size());
  for (const auto& [name, t] : saved) {
    const auto it = by_name.find(name);
    DTRAIN_CHECK(it != by_name.end(), "bench_checkpoint: the loaded {} lacks '{}'", what, name);
    const Tensor a = t.contiguous(), b = it->second.contiguous();
    DTRAIN_CHECK(a.dtype() == b.dtype() && a.shape() == b.shape() &&
                     std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0,
                 "bench_checkpoint: the loaded {}'s '{}' differs from the saved one", what, name);
  }
}

// The time of restore() of `from` into a freshly built model and optimizer (building them
// is not timed), which must then hold `t`'s state bit for bit.
double timed_load(const Config& c, const fs::path& from, const Training& t) {
  dist::LocalStrategy strategy;
  const std::shared_ptr<nn::Module> model = strategy.prepare(resnet50(c).model);
  optim::SGD optimizer(model->parameters(), kSgd);
  optim::LossScaler scaler({.enabled = false});
  train::Checkpointer checkpointer({.dir = {}, .resume = from.string()}, strategy);
  const auto start = Clock::now();
  const std::optional<train::Restored> restored = checkpointer.restore(optimizer, scaler);
  const double seconds = since(start);
  DTRAIN_CHECK(restored.has_value(), "bench_checkpoint: nothing restored from {}", from.string());
  check_identical("model", t.model->state_dict(), model->state_dict());
  check_identical("optimizer state", t.optimizer->state(), optimizer.state());
  return seconds;
}

// ---- figures -----------------------------------------------------------------------------

struct Measure {
  const char* key;    // JSON
  const char* label;  // table
  int decimals;
};

// In the order of a repetition's JSON line and of the table.
const std::vector<Measure>& measures() {
  static const std::vector<Measure> m{
      {"disk_write_s", "disk write + fsync, s", 3},
      {"disk_fsync_s", "  of which the fsync, s", 3},
      {"disk_write_gbps", "disk write + fsync, GB/s", 3},
      {"save_s", "save (sync), s", 3},
      {"save_write_s", "  of which the write (write_s), s", 3},
      {"save_gbps", "save (sync), GB/s", 3},
      {"save_over_disk", "save / disk write speed", 3},
      {"disk_read_s", "disk read (not cached), s", 3},
      {"disk_read_gbps", "disk read (not cached), GB/s", 3},
      {"load_cold_cached", "load cold: fraction still cached", 3},
      {"load_cold_s", "load cold, s", 3},
      {"load_cold_gbps", "load cold, GB/s", 3},
      {"load_warm_s", "load warm (page cache), s", 3},
      {"load_warm_gbps", "load warm (page cache), GB/s", 3},
      {"async_held_s", "async save: held (held_s), s", 3},
      {"async_call_s", "async save: save() call, s", 3},
      {"async_write_s", "async save: write (write_s), s", 3},
      {"held_over_write", "held_s / write_s", 3},
      {"held_over_sync_write", "held_s / the sync save's write_s", 3},
      {"step_ms", "step without a save, ms", 1},
      {"steps_during_save", "steps until the write was done", 0},
      {"step_during_save_ms", "step during the save, ms", 1},
      {"extra_s", "extra time, held_s included, s", 3},
      {"extra_over_write", "extra time / write_s", 3},
  };
  return m;
}

using Figures = std::map<std::string, double>;

struct Range {
  double median, min, max;
};

Range range(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}

double median(const std::vector<double>& v) { return range(v).median; }

// ---- the run -----------------------------------------------------------------------------

Figures repetition(const Config& c, int rep, Training& t, std::vector<std::uint8_t>& data, const fs::path& work) {
  Figures f;
  const double gb = static_cast<double>(data.size()) / 1e9;
  const fs::path scratch = work / "prewarm.bin";
  if (!c.cold) prewarm_page_cache(scratch, data);
  const DiskTimes disk = disk_baseline(work / "disk-baseline.bin", data);
  f["disk_write_s"] = disk.write_s;
  f["disk_fsync_s"] = disk.fsync_s;
  f["disk_write_gbps"] = gb / disk.write_s;
  f["disk_read_s"] = disk.read_s;
  f["disk_read_gbps"] = gb / disk.read_s;

  const fs::path checkpoints = work / "checkpoints";
  {
    train::Checkpointer sync({.dir = checkpoints, .async = false}, t.strategy);
    if (!c.cold) prewarm_page_cache(scratch, data);
    t.save(sync);
    const train::SaveTimes s = sync.last_save();
    DTRAIN_CHECK(s.bytes == data.size(), "bench_checkpoint: repetition {} wrote {} bytes, the first {}", rep, s.bytes,
                 data.size());
    f["save_s"] = s.held_s;
    f["save_write_s"] = s.write_s;
    f["save_gbps"] = gb / s.held_s;
    f["save_over_disk"] = f["save_gbps"] / f["disk_write_gbps"];
  }
  const fs::path saved = *checkpoint::CheckpointStore(checkpoints).latest();
  f["load_cold_cached"] = drop_checkpoint_from_cache(saved);
  f["load_cold_s"] = timed_load(c, saved, t);
  f["load_cold_gbps"] = gb / f["load_cold_s"];
  f["load_warm_s"] = timed_load(c, saved, t);
  f["load_warm_gbps"] = gb / f["load_warm_s"];
  remove_and_settle(checkpoints);

  std::vector<double> quiet;
  for (int i = 0; i < c.steps; ++i) quiet.push_back(t.step());
  const double step_s = median(quiet);
  {
    train::Checkpointer async({.dir = checkpoints, .async = true}, t.strategy);
    if (!c.cold) prewarm_page_cache(scratch, data);
    const auto start = Clock::now();
    t.save(async);
    f["async_call_s"] = since(start);
    std::vector<double> during;
    do {
      during.push_back(t.step());
    } while (async.last_save().write_s == 0 && static_cast<int>(during.size()) < kMaxStepsDuringSave);
    const double window = since(start);
    async.finish();  // throws the write's error, if any
    const train::SaveTimes s = async.last_save();
    f["async_held_s"] = s.held_s;
    f["async_write_s"] = s.write_s;
    f["held_over_write"] = s.held_s / s.write_s;
    // The write above is slowed by the training steps beside it; against the write alone
    // (the sync save's), the hold-up looks as it would with training on other cores.
    f["held_over_sync_write"] = s.held_s / f["save_write_s"];
    f["step_ms"] = 1e3 * step_s;
    f["steps_during_save"] = static_cast<double>(during.size());
    f["step_during_save_ms"] = 1e3 * median(during);
    // The save's cost to training: the window from save() to the end of the step in which
    // the write ended, against as many steps without a save.
    f["extra_s"] = window - static_cast<double>(during.size()) * step_s;
    f["extra_over_write"] = f["extra_s"] / s.write_s;
  }
  remove_and_settle(checkpoints);
  return f;
}

std::string fixed(double v, int decimals) { return fmt::format("{:.{}f}", v, decimals); }

void print_repetition(const Config& c, int rep, const Figures& f) {
  if (c.json) {
    nlohmann::ordered_json j = {{"bench", "checkpoint"}, {"rep", rep}};
    for (const Measure& m : measures()) j[m.key] = bench::round4(f.at(m.key));
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("rep {}: disk write {} GB/s, save {} GB/s ({} of disk), disk read {} GB/s, load cold {} GB/s "
               "({} cached), warm {} GB/s; async held {} s of a {} s write ({}), {} steps of {} ms (quiet: {} ms), "
               "{:+.3f} s\n",
               rep, fixed(f.at("disk_write_gbps"), 3), fixed(f.at("save_gbps"), 3), fixed(f.at("save_over_disk"), 2),
               fixed(f.at("disk_read_gbps"), 3), fixed(f.at("load_cold_gbps"), 3), fixed(f.at("load_cold_cached"), 3),
               fixed(f.at("load_warm_gbps"), 3), fixed(f.at("async_held_s"), 3), fixed(f.at("async_write_s"), 3),
               fixed(f.at("held_over_write"), 3), f.at("steps_during_save"), fixed(f.at("step_during_save_ms"), 1),
               fixed(f.at("step_ms"), 1), f.at("extra_s"));
  }
  std::fflush(stdout);
}

void print_summary(const Config& c, const std::vector<Figures>& reps) {
  const auto values = [&reps](const char* key) {
    std::vector<double> v;
    for (const Figures& f : reps) v.push_back(f.at(key));
    return v;
  };
  const Range save = range(values("save_over_disk")), held = range(values("held_over_write"));
  const bool save_met = save.median >= 0.70, held_met = held.median < 0.10;
  if (c.json) {
    nlohmann::ordered_json j = {{"bench", "checkpoint"}, {"summary", "median"}};
    for (const Measure& m : measures()) {
      const Range r = range(values(m.key));
      j[m.key] = {{"median", bench::round4(r.median)}, {"min", bench::round4(r.min)}, {"max", bench::round4(r.max)}};
    }
    j["save_target_met"] = save_met;
    j["held_target_met"] = held_met;
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("\nmedian (min-max) over {} repetitions, then each repetition's value\n", reps.size());
  for (const Measure& m : measures()) {
    const Range r = range(values(m.key));
    std::string each;
    for (double v : values(m.key)) each += fmt::format(" {:>8}", fixed(v, m.decimals));
    const std::string summary =
        fmt::format("{} ({}-{})", fixed(r.median, m.decimals), fixed(r.min, m.decimals), fixed(r.max, m.decimals));
    fmt::print("{:<36}{:>26} |{}\n", m.label, summary, each);
  }
  fmt::print("\ntarget: save >= 0.70 of the disk's write speed: {} (median; {}-{}): {}\n", fixed(save.median, 3),
             fixed(save.min, 3), fixed(save.max, 3), save_met ? "met" : "missed");
  const Range alone = range(values("held_over_sync_write"));
  fmt::print("target: held_s < 0.10 of write_s: {} (median; {}-{}): {}; against the sync save's write, which no "
             "training slows: {} ({}-{})\n",
             fixed(held.median, 3), fixed(held.min, 3), fixed(held.max, 3), held_met ? "met" : "missed",
             fixed(alone.median, 3), fixed(alone.min, 3), fixed(alone.max, 3));
}

int run(const Config& c) {
  spdlog::set_level(spdlog::level::warn);  // the Checkpointer's line per save: the table has the figures
  set_num_threads(c.threads);
  manual_seed(1);
  Training t(c);
  // The first step creates the momentum buffers; the others warm the allocator's caches.
  for (int i = 0; i < c.warmup; ++i) t.step();

  const fs::path work = fs::path(c.dir) / fmt::format("bench_checkpoint-{}", ::getpid());
  fs::create_directories(work);
  struct RemoveAtExit {  // also when a measurement throws: it holds a few hundred MB
    fs::path path;
    ~RemoveAtExit() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } remove_work{work};
  std::uint64_t bytes = 0;
  {
    // One save to learn the checkpoint's size (untimed; it also warms the code paths).
    train::Checkpointer probe({.dir = work / "checkpoints", .async = false}, t.strategy);
    t.save(probe);
    bytes = probe.last_save().bytes;
  }
  remove_and_settle(work / "checkpoints");
  std::vector<std::uint8_t> data(bytes);
  {
    std::mt19937_64 rng(7);  // random bytes: a disk or file system that shortcuts zeros must not
    std::size_t i = 0;
    for (; i + 8 <= data.size(); i += 8) {
      const std::uint64_t v = rng();
      std::memcpy(data.data() + i, &v, 8);
    }
    for (; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(rng());
  }

  const std::string model = fmt::format("ResNet-50 ({} parameters), SGD momentum 0.9, batch {} of {}x{}",
                                        t.model->num_parameters(), c.batch, c.image, c.image);
  const std::string where = fmt::format("{} ({})", work.string(), filesystem_of(work));
  const std::string machine =
      fmt::format("{}, {:.0f} GB, {}", bench::machine_description(), memory_gb(), kernel());
  if (c.json) {
    fmt::print("{}\n", nlohmann::ordered_json{{"bench", "checkpoint"},
                                              {"machine", machine},
                                              {"model", model},
                                              {"bytes", bytes},
                                              {"dir", where},
                                              {"threads", c.threads},
                                              {"prewarm", !c.cold}}
                           .dump());
  } else {
    fmt::print("bench_checkpoint: {}; checkpoint {:.1f} MB (model + optimizer files); {} repetitions; {} training "
               "thread(s); in {}; {}\n",
               model, static_cast<double>(bytes) / 1e6, c.reps, c.threads, where, machine);
    fmt::print("GB = 1e9 bytes. {}. The cold loads and the disk read follow posix_fadvise(DONTNEED) on the files "
               "(the fraction of pages still cached after it is shown); the warm loads are served from the page "
               "cache.\n",
               c.cold ? "No untimed write before the timed ones (--cold)"
                      : "Each timed write follows an untimed one of as many bytes (page cache prewarmed)");
  }
  std::fflush(stdout);

  std::vector<Figures> reps;
  for (int rep = 1; rep <= c.reps; ++rep) {
    reps.push_back(repetition(c, rep, t, data, work));
    print_repetition(c, rep, reps.back());
  }
  print_summary(c, reps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Checkpoint save and load speed of ResNet-50 with SGD momentum against the disk's own speed, and the "
               "time an asynchronous save holds up training",
               "bench_checkpoint"};
  Config c;
  app.add_option("--dir", c.dir, "where to write (a fresh folder inside it, removed at the end)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  app.add_option("--reps", c.reps, "repetitions of every measurement")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--steps", c.steps, "training steps timed without a save per repetition")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", c.warmup, "training steps before any measurement (at least 1: it creates the momentum)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--batch", c.batch, "images per training step")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--image", c.image, "image side (ImageNet stem)")->check(CLI::Range(32, 1024))->capture_default_str();
  app.add_option("--threads", c.threads, "intra-op threads of training")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_flag("--cold", c.cold,
               "skip the untimed write of as many bytes before each timed write (the disk's, the saves'), which "
               "gives them page-cache memory in the same state");
  app.add_flag("--json", c.json, "print JSON lines (the setup, one per repetition, the medians) instead of a table");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(c);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_checkpoint: error: {}\n", e.what());
    return 1;
  }
}
