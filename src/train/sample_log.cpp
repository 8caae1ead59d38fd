#include "train/sample_log.h"

#include "dtrain/core/environment.h"
#include "dtrain/core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>

namespace dtrain::train {

namespace {

int attempt_number() {
  const long n = env::get_int("DTRAIN_RESTART_COUNT").value_or(0);
  DTRAIN_CHECK(n >= 0 && n < (1L << 30), "DTRAIN_RESTART_COUNT={}: expected a count >= 0", n);
  return static_cast<int>(n);
}

}  // namespace

SampleLog::SampleLog(const std::filesystem::path& dir, SampleLogShape shape,
                     std::shared_ptr<const data::Sampler> sampler)
    : shape_(shape), sampler_(std::move(sampler)) {
  DTRAIN_CHECK(sampler_ != nullptr, "SampleLog: no sampler given");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  DTRAIN_CHECK(!ec, "--sample-log {}: cannot create the directory ({})", dir.string(), ec.message());
  const int attempt = attempt_number();
  path_ = dir / fmt::format("attempt-{}-rank-{}.txt", attempt, shape.rank);
  file_ = std::fopen(path_.c_str(), "w");
  DTRAIN_CHECK(file_ != nullptr, "--sample-log {}: cannot write {}", dir.string(), path_.string());
  fmt::print(file_, "# dtrain sample log: rank {} of {}, attempt {}, shard {} of {}, dataset {}, global batch {}\n",
             shape.rank, shape.world_size, attempt, shape.shard, shape.shards, shape.dataset_size, shape.global_batch);
  std::fflush(file_);
}

SampleLog::~SampleLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void SampleLog::record(int epoch, std::int64_t global_step, std::int64_t step_in_epoch,
                       std::span<const std::int64_t> numbers) {
  if (order_epoch_ != epoch) {
    order_ = sampler_->indices(epoch - 1);  // the loader's epochs count from 0
    order_epoch_ = epoch;
  }
  // The wall-clock time: a relaunch's first update is compared with the launcher's records.
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string line = fmt::format("{} {} {} {:.3f}", epoch, global_step, step_in_epoch, now);
  const auto size = static_cast<std::int64_t>(order_.size());
  for (const std::int64_t b : numbers) {
    const std::int64_t begin = std::min(size, b * shape_.micro_batch);
    const std::int64_t end = std::min(size, begin + shape_.micro_batch);
    for (std::int64_t i = begin; i < end; ++i) fmt::format_to(std::back_inserter(line), " {}", order_[i]);
  }
  line += '\n';
  const bool written = std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  DTRAIN_CHECK(written, "--sample-log: writing {} failed", path_.string());
}

}  // namespace dtrain::train
