// The sample log (TrainerOptions::sample_log): which samples each applied update took, one
// text file per rank and attempt, so that a job's data lineage can be audited across
// restarts and membership changes (tools/check_sample_log.py counts every sample of an
// epoch into exactly one update of the run's final lineage).
//
//   <dir>/attempt-<A>-rank-<R>.txt   (A: DTRAIN_RESTART_COUNT, 0 without a launcher)
//   # dtrain sample log: rank R of W, attempt A, shard I of S, dataset N, global batch G
//   <epoch> <global step> <update in epoch> <unix time, s> <index> <index> ...
//
// A line is written once the update is applied (after the strategy's step returned) and
// flushed at once, so a rank killed later leaves every applied update it took on disk. An
// update a job redid after a restart appears in both attempts; the later one counts.
#pragma once

#include "dtrain/data/sampler.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

namespace dtrain::train {

// Ranks that read the same shard (a pipeline's stages, say) write the same indices: the
// checker counts one of them per shard.
struct SampleLogShape {
  int rank = 0, world_size = 1, shards = 1, shard = 0;
  std::int64_t dataset_size = 0, global_batch = 0, micro_batch = 0;
};

class SampleLog {
 public:
  // Creates `dir` and this rank's file (replacing one left by an earlier run of the same
  // attempt number); `sampler` is the rank's training sampler, whose order the loader read.
  SampleLog(const std::filesystem::path& dir, SampleLogShape shape, std::shared_ptr<const data::Sampler> sampler);
  ~SampleLog();
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;

  // Update `step_in_epoch` (1-based) of `epoch` (1-based), global step `global_step`, made of
  // the loader's batches `numbers` of that epoch.
  void record(int epoch, std::int64_t global_step, std::int64_t step_in_epoch, std::span<const std::int64_t> numbers);

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  SampleLogShape shape_;
  std::shared_ptr<const data::Sampler> sampler_;
  int order_epoch_ = -1;  // the epoch whose order is cached
  std::vector<std::int64_t> order_;
};

}  // namespace dtrain::train
