// Checkpointer::restore: the checkpoint `resume` names, read once, loaded into the module,
// the optimizer and the loss scaler, and this rank's record (checkpointer.h).
#include "dtrain/checkpoint/store.h"
#include "dtrain/core/error.h"
#include "dtrain/train/checkpointer.h"
#include "train/checkpoint_names.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <map>
#include <set>

namespace dtrain::train {

namespace fs = std::filesystem;
using checkpoint::NamedTensors;

namespace {

// The checkpoint `resume` names: "auto" the latest under `dir` (none: nullopt), a
// checkpoint root (holding `latest`) its latest, else the directory itself.
std::optional<fs::path> resume_dir(const std::string& resume, const fs::path& dir) {
  if (resume == "auto") return checkpoint::CheckpointStore(dir).latest();
  fs::path named = resume;
  if (!fs::exists(named / "manifest.json") && fs::exists(named / "latest")) {
    const auto latest = checkpoint::CheckpointStore(named).latest();
    DTRAIN_CHECK(latest.has_value(), "checkpoint {}: `latest` names no whole checkpoint", named.string());
    named = *latest;
  }
  return named;
}

// Every tensor of the checkpoint's model and optimizer files, each file read once.
struct SavedTensors {
  std::map<std::string, std::pair<Tensor, std::string>> model;  // whole tensors: name -> (tensor, file)
  NamedTensors model_ranges;                                    // "<name>[begin:end]" (sharded stage 3)
  NamedTensors optimizer;
  std::vector<std::string> model_files;
};

SavedTensors read_tensors(const checkpoint::OpenCheckpoint& c) {
  SavedTensors out;
  for (const checkpoint::FileRecord& f : c.manifest.files) {
    const bool model = f.name.rfind("model", 0) == 0, optim = f.name.rfind("optimizer", 0) == 0;
    if (!model && !optim) continue;
    const auto file = checkpoint::SafetensorsFile::parse((c.dir / f.name).string(), c.read_verified(f));
    for (const std::string& name : file.names()) {
      if (!model) out.optimizer.emplace_back(name, file.tensor(name));
      else if (name.find('[') != std::string::npos) out.model_ranges.emplace_back(name, file.tensor(name));
      else out.model.emplace(name, std::pair{file.tensor(name), f.name});
    }
    if (model) out.model_files.push_back(f.name);
  }
  DTRAIN_CHECK(!out.model_files.empty(), "checkpoint {}: the manifest lists no model file", c.dir.string());
  return out;
}

// The module's state: every tensor it has, by name, from whichever part holds it, checked
// against the module's shapes (and, for a whole model restored from whole models, a tensor
// it lacks means another model).
void load_model(const checkpoint::OpenCheckpoint& c, SavedTensors& saved, nn::Module& module,
                const dist::CheckpointPlan& plan) {
  const std::string dir = c.dir.string(), files = fmt::format("{}", fmt::join(saved.model_files, ", "));
  auto& found = saved.model;
  for (auto& [name, t] :
       join_ranges(saved.model_ranges, module, fmt::format("checkpoint {} (model files)", dir), plan.whole_shapes)) {
    found.emplace(name, std::pair{t, files});
  }
  const nn::StateDict mine = module.state_dict();
  std::size_t present = 0;
  for (const auto& [name, t] : mine) present += found.count(name);
  DTRAIN_CHECK(present > 0 || mine.empty(),
               "checkpoint {} holds a different model: none of this model's {} tensors (first '{}') are in {}, which "
               "hold '{}'... (saved from: {})",
               dir, mine.size(), mine.front().first, files, found.empty() ? "" : found.begin()->first,
               c.manifest.model);
  // A tied weight's later names: saved where the saver listed them (a whole model's state
  // dict), else (ZeRO-3's parameter ranges, one per parameter) read under the first name.
  std::map<std::string, std::string> first_name;
  for (const auto& [alias, name] : module.parameter_aliases()) first_name.emplace(alias, name);
  nn::StateDict load;
  for (const auto& [name, t] : mine) {
    const auto alias = first_name.find(name);
    if (alias != first_name.end() && plan.load_model_share) continue;  // the share loads parameters once
    auto it = found.find(name);
    if (it == found.end() && alias != first_name.end()) it = found.find(alias->second);
    DTRAIN_CHECK(it != found.end(), "checkpoint {}: tensor '{}' of this model is missing from {} (saved from: {})", dir,
                 name, files, c.manifest.model);
    const Tensor& tensor = it->second.first;
    const auto whole = plan.whole_shapes.find(name);  // a tensor-parallel slice's whole
    const Shape& expected = whole == plan.whole_shapes.end() ? t.shape() : whole->second;
    DTRAIN_CHECK(tensor.shape() == expected, "checkpoint {}: tensor '{}' has shape {} in {}, this model's is {}", dir,
                 name, shape_str(tensor.shape()), it->second.second, shape_str(expected));
    load.emplace_back(name, tensor);
  }
  if (plan.whole_model && c.manifest.job.stages == 1) {
    std::set<std::string> names;
    for (const auto& [name, t] : mine) names.insert(name);
    for (const auto& [name, entry] : found) {
      DTRAIN_CHECK(names.count(name),
                   "checkpoint {}: {} holds tensor '{}', which this model does not have (a different "
                   "model? saved from: {})",
                   dir, entry.second, name, c.manifest.model);
    }
  }
  if (plan.local_entries) load = plan.local_entries(std::move(load));
  if (plan.load_model_share) plan.load_model_share(load);
  else module.load_state_dict(load);
}

// The optimizer's state (this rank's share where it is sharded) and the loss scaler's.
void load_optimizer(const checkpoint::OpenCheckpoint& c, const SavedTensors& saved, const nn::Module& module,
                    const dist::CheckpointPlan& plan, optim::Optimizer& optimizer, optim::LossScaler& scaler) {
  const std::string origin = fmt::format("checkpoint {} (optimizer files)", c.dir.string());
  NamedTensors tensors = join_ranges(saved.optimizer, module, origin, plan.whole_shapes);
  if (plan.local_entries) tensors = plan.local_entries(std::move(tensors));
  if (plan.load_optimizer_share) plan.load_optimizer_share(optimizer, tensors);
  else load_named_optimizer_state(optimizer, module, tensors, origin);
  NamedTensors scaler_state;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name.rfind(kScalerPrefix, 0) == 0 && seen.insert(name).second) {
      scaler_state.emplace_back(name.substr(std::string(kScalerPrefix).size()), t);
    }
  }
  if (!scaler_state.empty()) scaler.load_state(scaler_state);
}

// This rank's record: the generator continues from the record of rank (r mod saved ranks);
// the gradient exchange's own state and the epoch's sums only on the saving job's layout.
Restored restore_record(const checkpoint::OpenCheckpoint& c, const dist::CheckpointPlan& plan) {
  const checkpoint::Manifest& m = c.manifest;
  const bool same_shape = m.job.world_size == plan.ranks && m.job.stages == plan.stages &&
                          m.job.replicas == plan.replicas && m.job.servers == plan.servers &&
                          m.job.mesh == mesh_axes(plan);
  int from = plan.rank % m.job.world_size;
  const checkpoint::FileRecord* rf = c.find(fmt::format("rank-{}.json", from));
  if (rf == nullptr && m.job.servers > 0) {
    // A parameter-server worker lost before the save left no record: start as rank 0.
    from = 0;
    rf = c.find("rank-0.json");
  }
  DTRAIN_CHECK(rf != nullptr, "checkpoint {}: the manifest lists no rank-{}.json", c.dir.string(), from);
  const std::vector<std::uint8_t> text = c.read_verified(*rf);
  const checkpoint::RankRecord record =
      checkpoint::RankRecord::parse((c.dir / rf->name).string(), std::string(text.begin(), text.end()));
  default_generator().set_state(record.rng_seed, record.rng_offset);
  if (plan.load_rank_state) {
    const checkpoint::FileRecord* ef = c.find(part_file("exchange", rank_part(plan.rank)));
    const bool saved = c.find(part_file("exchange", rank_part(0))) != nullptr;
    if (ef != nullptr && same_shape) {
      const auto file = checkpoint::SafetensorsFile::parse((c.dir / ef->name).string(), c.read_verified(*ef));
      NamedTensors state;
      for (const std::string& name : file.names()) state.emplace_back(name, file.tensor(name));
      plan.load_rank_state(state);
    } else if (saved && !same_shape) {
      spdlog::warn(
          "checkpoint {}: saved by {} rank(s) in another layout, the gradient exchange's own state (error "
          "feedback) is not restored and starts afresh",
          c.dir.string(), m.job.world_size);
    }
  }
  Restored r{.from = c.dir, .manifest = m, .epoch_sums = std::nullopt};
  if (same_shape && from == plan.rank) r.epoch_sums = record.epoch_sums;
  return r;
}

}  // namespace

std::optional<Restored> Checkpointer::restore(optim::Optimizer& optimizer, optim::LossScaler& scaler) {
  if (options_.resume.empty()) return std::nullopt;
  const std::optional<fs::path> dir = resume_dir(options_.resume, options_.dir);
  if (!dir) return std::nullopt;
  check_slices_named(plan_, "resuming");
  const checkpoint::OpenCheckpoint c = checkpoint::OpenCheckpoint::open(*dir);
  const std::string saved_mesh = checkpoint::describe_mesh(c.manifest.job.mesh);
  const std::string this_mesh = checkpoint::describe_mesh(mesh_axes(plan_));
  for (const checkpoint::MeshAxis& a : c.manifest.job.mesh) {
    DTRAIN_CHECK(dist::restorable_dimension(a.name),
                 "checkpoint {} was saved on mesh {}, which this job's mesh {} cannot map: dimension '{}' holds "
                 "slices this dtrain does not reslice (it reslices dp, dp_replicate, dp_shard, pp, tp and "
                 "parameter-server workers and servers)",
                 dir->string(), saved_mesh, this_mesh, a.name);
  }
  // Every tensor is found by name and joined from its ranges, so the meshes need not match;
  // when a tensor cannot be found or joined, the error says which meshes were involved.
  try {
    SavedTensors saved = read_tensors(c);
    load_model(c, saved, strategy_.module(), plan_);
    load_optimizer(c, saved, strategy_.module(), plan_, optimizer, scaler);
  } catch (const Error& e) {
    if (saved_mesh == this_mesh) throw;
    DTRAIN_FAIL("{} (the checkpoint was saved on mesh {}, this job's is {})", e.message(), saved_mesh, this_mesh);
  }
  return restore_record(c, plan_);
}

}  // namespace dtrain::train
