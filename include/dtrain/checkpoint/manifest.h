// What a checkpoint holds, as JSON: the manifest (manifest.json, written last, by rank 0)
// lists every file with its size and checksum, the job's shape and the training position;
// each rank's record (rank-<r>.json, that rank's last file) holds its own random-number
// state, its running epoch sums and the files it wrote. docs/CHECKPOINTS.md describes the
// layout. Parsing checks every field and names the file and the field when one is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::checkpoint {

// Manifests of a later format are refused with an error naming both versions.
inline constexpr int kFormatVersion = 1;

struct FileRecord {
  std::string name;  // relative to the checkpoint directory
  std::uint64_t bytes = 0;
  std::string xxh3;  // Checksum::hex()
  int rank = 0;      // the rank that wrote it
};

// One dimension of the saving job's device mesh: "pp", "dp_shard", ... ("worker.dp" for a
// dimension of one role in a mesh of several roles).
struct MeshAxis {
  std::string name;
  int size = 1;
  bool operator==(const MeshAxis&) const = default;
};

// How the job that saved was laid out (for re-sharding, and for the messages).
struct JobShape {
  std::string strategy;  // Strategy::name()
  int world_size = 1;
  int stages = 1;    // pipeline stages
  int replicas = 1;  // model replicas (data-parallel ranks, or pipelines)
  int servers = 0;   // parameter servers
  // The device mesh, its dimensions of more than one rank in the mesh's order (empty: one
  // process, or a checkpoint written before the mesh was recorded). The tensors say which
  // slices each rank wrote: "<name>[begin:end]" entries in the files of the ranks that
  // hold ranges, whole tensors in a stage's or the model's file.
  std::vector<MeshAxis> mesh;
};

// "pp=2 x dp_shard=2", or "one process" for an empty mesh.
std::string describe_mesh(const std::vector<MeshAxis>& mesh);

// Where training stood: the next update is update `step_in_epoch` (0-based) of `epoch`.
struct TrainingPosition {
  std::int64_t global_step = 0;    // updates done since the start
  int epoch = 1;                   // 1-based; epochs + 1 once every epoch is done
  std::int64_t step_in_epoch = 0;  // updates done in `epoch`
  std::int64_t updates_per_epoch = 0;
  int epochs = 0;               // the run's planned number of epochs
  std::int64_t batch_size = 0;  // global
  std::uint64_t data_seed = 0;
};

struct Manifest {
  int format_version = kFormatVersion;
  std::string created;  // UTC, ISO 8601
  std::string model;    // the model's summary line (e.g. its parameter count), for messages
  JobShape job;
  TrainingPosition position;
  std::vector<FileRecord> files;

  std::string to_json() const;
  // `origin` names the file in errors.
  static Manifest parse(const std::string& origin, const std::string& text);
};

// One rank's part of a checkpoint.
struct RankRecord {
  int rank = 0;
  std::uint64_t rng_seed = 0, rng_offset = 0;  // the default generator (dropout, ...)
  // The Trainer's running sums of the epoch in progress (loss, accuracy), so that a resumed
  // epoch's line counts the updates before the interruption too.
  std::vector<double> epoch_sums;
  std::vector<FileRecord> files;  // the files this rank wrote, before this record
  std::string error;              // non-empty: this rank's save failed, and why

  std::string to_json() const;
  static RankRecord parse(const std::string& origin, const std::string& text);
};

}  // namespace dtrain::checkpoint
