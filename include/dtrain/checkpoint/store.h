// CheckpointStore: a directory of checkpoints. Each checkpoint is a directory
// step-<global step, 9 digits>/ built under the name .incomplete-step-.../ by every rank
// that saves, and renamed by rank 0 once all of them are done and the manifest is
// written, so a checkpoint is either whole or absent. `latest` (rewritten atomically,
// last) names the newest; the oldest beyond `keep` are then removed.
//
// The ranks meet through the file system, not through messages: each rank's record
// (rank-<r>.json) is the last file it writes, and rank 0 commits when it has found all of
// them. So the directory must be one every rank sees (one machine, or a shared file
// system, as for PyTorch's distributed checkpoints), and saving needs no collective on
// the background threads that write.
#pragma once

#include "dtrain/checkpoint/manifest.h"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::checkpoint {

class CheckpointStore {
 public:
  explicit CheckpointStore(std::filesystem::path dir);
  const std::filesystem::path& dir() const { return dir_; }

  static std::string name_of(std::int64_t global_step);  // "step-000000120"
  std::filesystem::path incomplete(std::int64_t global_step) const;
  std::filesystem::path final_path(std::int64_t global_step) const { return dir_ / name_of(global_step); }

  // Removes the .incomplete-* directories that a crashed save left (rank 0, before any
  // rank starts a save).
  void remove_incomplete() const;
  // Waits until every rank in [0, ranks) but those `absent` (ranks that left the job) has
  // written its record into the incomplete directory of `global_step`, and returns them in
  // rank order; throws naming the rank whose save failed, or when `cancel` is set (the job
  // is going down).
  std::vector<RankRecord> wait_for_ranks(std::int64_t global_step, int ranks, const std::atomic<bool>& cancel,
                                         const std::vector<int>& absent = {}) const;
  // Writes the manifest, renames the incomplete directory to its final name, updates
  // `latest`, and removes the oldest checkpoints beyond `keep` (0 keeps all). Rank 0.
  std::filesystem::path commit(std::int64_t global_step, const Manifest& manifest, int keep) const;

  // The checkpoint `latest` names; without a readable `latest` (a crash between the
  // rename and its update), the newest step-* directory holding a manifest; nullopt when
  // there is none.
  std::optional<std::filesystem::path> latest() const;
  // Every committed checkpoint, oldest first.
  std::vector<std::filesystem::path> list() const;

 private:
  std::filesystem::path dir_;
};

// A committed checkpoint, opened for loading: the manifest parsed and every file checked
// to exist with its recorded size (a truncated file is named here). Checksums are checked
// as each file is read (read_verified).
struct OpenCheckpoint {
  std::filesystem::path dir;
  Manifest manifest;

  static OpenCheckpoint open(const std::filesystem::path& dir);
  // The files whose names start with `prefix` (e.g. "model").
  std::vector<FileRecord> files_starting(const std::string& prefix) const;
  const FileRecord* find(const std::string& name) const;
  // The file's bytes, after checking its size and checksum against the manifest.
  std::vector<std::uint8_t> read_verified(const FileRecord& file) const;
};

}  // namespace dtrain::checkpoint
