// What the Checkpointer's saving (checkpointer.cpp) and restoring (checkpointer_restore.cpp)
// agree on (private to train): the files' names and the joining of element ranges.
#pragma once

#include "dtrain/checkpoint/manifest.h"
#include "dtrain/checkpoint/safetensors.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/layers/module.h"

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

namespace dtrain::train {

// The loss scaler's entries in the optimizer files.
inline constexpr const char* kScalerPrefix = "loss_scaler/";

// The part name of what one rank saves of its own (CheckpointPlan::rank_state).
inline std::string rank_part(int rank) { return fmt::format("rank{}", rank); }

inline std::string part_file(const char* kind, const std::string& part) {
  // A whole model is "model.safetensors", the name Python users expect.
  return part == "model" ? fmt::format("{}.safetensors", kind) : fmt::format("{}-{}.safetensors", kind, part);
}

// Entries named "<parameter>[begin:end]<suffix>" (a flat element range, as ranks that
// hold shares of a parameter save them) or "<parameter>[d<dim>:begin:end]<suffix>" (a slice
// along one dimension, as tensor-parallel ranks save them) joined into "<parameter><suffix>"
// of the parameter's whole shape (the module's, or `whole_shapes`' for the parameters this
// rank holds slices of); the ranges must cover it exactly. Other entries pass through.
checkpoint::NamedTensors join_ranges(const checkpoint::NamedTensors& tensors, const nn::Module& module,
                                     const std::string& origin, const std::map<std::string, Shape>& whole_shapes = {});

// Refuses a tensor-parallel layout whose strategy does not name its slices (ZeRO with tp:
// its shares are element ranges of the slices, which no other layout could join).
inline void check_slices_named(const dist::CheckpointPlan& plan, const char* what) {
  for (const dist::MeshDim& d : plan.mesh) {
    DTRAIN_CHECK(d.name != "tp" || plan.slice_entries != nullptr,
                 "checkpoint: {} with tensor parallelism is offered for dp and pp layouts, not yet for zero with tp",
                 what);
  }
}

// The strategy's mesh as the manifest records it.
inline std::vector<checkpoint::MeshAxis> mesh_axes(const dist::CheckpointPlan& plan) {
  std::vector<checkpoint::MeshAxis> out;
  for (const dist::MeshDim& d : plan.mesh) out.push_back({d.name, d.size});
  return out;
}

}  // namespace dtrain::train
