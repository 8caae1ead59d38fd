// Helpers of the sharded-optimizer tests (test_zero.cpp, test_pipeline_sharded.cpp):
// parameter snapshots compared by relative difference, a small dataset, and a checkpoint
// directory shared by the ranks.
#pragma once

#include "dtrain/data/tensor_dataset.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/layers/module.h"
#include "dtrain/tensor/ops.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace dtrain::test {

inline std::vector<Tensor> snapshot(const nn::Module& m) {
  std::vector<Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.data().clone());
  return out;
}

// max |a - b| over max |b|, over all parameters.
inline double relative_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, max_abs_diff(a[i], b[i]));
    scale = std::max(scale, max_abs_diff(b[i], Tensor::zeros(b[i].shape())));
  }
  return diff / std::max(scale, 1e-30);
}

// Shard `shard` of `shards`' micro-batches of update `step` (`rows` each, `accumulate` of
// them): rows of one global batch of 5 normal features and 3 classes, the same on every rank,
// on `device`.
inline std::vector<dist::MicroBatch> three_class_batches(int step, int accumulate, int shard, int shards,
                                                         std::int64_t rows, Device device = Device::cpu()) {
  Generator gen(100 + static_cast<std::uint64_t>(step));
  const std::int64_t total = rows * shards * accumulate;
  Tensor x = Tensor::empty({total, 5});
  normal_(x, 0, 1, &gen);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(total));
  for (std::int64_t i = 0; i < total; ++i) labels[static_cast<std::size_t>(i)] = (i * 5 + step) % 3;
  const Tensor y = Tensor::from_vector(labels, {total});
  std::vector<dist::MicroBatch> out;
  for (int a = 0; a < accumulate; ++a) {
    const std::int64_t begin = (static_cast<std::int64_t>(a) * shards + shard) * rows;
    out.push_back({x.narrow(0, begin, rows).to(device).contiguous(), y.narrow(0, begin, rows).to(device).contiguous()});
  }
  return out;
}

// `rows` rows of 5 normal features, labels i * 7 mod 3: a dataset for a Trainer.
inline std::shared_ptr<data::TensorDataset> three_class_data(std::int64_t rows = 64) {
  Generator gen(9);
  Tensor x = Tensor::empty({rows, 5});
  normal_(x, 0, 1, &gen);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i * 7 % 3);
  return std::make_shared<data::TensorDataset>(x, Tensor::from_vector(labels, {rows}));
}

// A fresh temp directory for every rank of `world`, named by rank 0 (collective).
inline std::filesystem::path shared_temp_dir(dist::Communicator& world, const std::string& prefix) {
  Tensor tag = Tensor::full({1}, static_cast<double>(::getpid()), {DType::f64});
  world.broadcast(tag, 0);
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("{}_{}", prefix, static_cast<long>(tag.item()));
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  world.barrier();
  return dir;
}

// The earliest whole checkpoint under `dir` (empty if none).
inline std::filesystem::path first_checkpoint(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> saved;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_directory() && std::filesystem::exists(e.path() / "manifest.json")) saved.push_back(e.path());
  }
  std::sort(saved.begin(), saved.end());
  return saved.empty() ? std::filesystem::path() : saved.front();
}

}  // namespace dtrain::test
