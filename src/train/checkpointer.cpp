#include "dtrain/train/checkpointer.h"

#include "dtrain/checkpoint/atomic_file.h"
#include "dtrain/checkpoint/store.h"
#include "dtrain/core/error.h"
#include "dtrain/core/parallel.h"
#include "dtrain/tensor/ops.h"
#include "train/checkpoint_names.h"
#include "train/fault_injection.h"
#include "train/range_key.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

namespace dtrain::train {

namespace fs = std::filesystem;
using checkpoint::NamedTensors;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// A copy in host memory that later steps cannot change.
Tensor host_copy(const Tensor& t) {
  return t.device().is_cpu() ? t.contiguous().clone() : t.to(Device::cpu()).contiguous();
}

// Copies `tensors` into host memory in place, reusing the previous snapshot's buffers where
// the shapes match (fresh memory is paid for in page faults, which would double the time
// a step is held) and spreading the copies over the thread pool.
void copy_into_host(NamedTensors& tensors, std::vector<Tensor>& pool) {
  std::vector<Tensor> targets(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    if (!t.device().is_cpu()) {
      tensors[i].second = t.to(Device::cpu());  // a new host tensor already: nothing left to copy
      continue;
    }
    if (i < pool.size() && pool[i].defined() && pool[i].shape() == t.shape() && pool[i].dtype() == t.dtype()) {
      targets[i] = std::move(pool[i]);
    } else {
      targets[i] = Tensor::empty(t.shape(), {t.dtype()});
    }
  }
  pool.clear();
  parallel_for(0, static_cast<std::int64_t>(tensors.size()), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (targets[k].defined()) targets[k].copy_(tensors[k].second);
    }
  });
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (targets[i].defined()) tensors[i].second = std::move(targets[i]);
  }
}

// The name of each of the optimizer's parameters in `module`.
std::vector<std::string> parameter_names(const optim::Optimizer& optimizer, const nn::Module& module) {
  std::unordered_map<const void*, std::string> by_id;
  for (const auto& [name, p] : module.named_parameters()) by_id.emplace(p.id(), name);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < optimizer.params().size(); ++i) {
    const auto it = by_id.find(optimizer.params()[i].id());
    DTRAIN_CHECK(it != by_id.end(), "checkpoint: the optimizer's parameter {} is not one of the model's", i);
    names.push_back(it->second);
  }
  return names;
}

// "<buffer>.<index>" -> (buffer, index).
std::pair<std::string, std::size_t> split_indexed(const std::string& key) {
  const auto dot = key.rfind('.');
  DTRAIN_CHECK(dot != std::string::npos, "checkpoint: unexpected optimizer entry '{}'", key);
  return {key.substr(0, dot), static_cast<std::size_t>(std::stoull(key.substr(dot + 1)))};
}

}  // namespace

NamedTensors join_ranges(const NamedTensors& tensors, const nn::Module& module, const std::string& origin,
                         const std::map<std::string, Shape>& whole_shapes) {
  std::unordered_map<std::string, Shape> shapes;
  for (const auto& [name, p] : module.named_parameters()) shapes.emplace(name, p.shape());
  for (const auto& [alias, name] : module.parameter_aliases()) shapes.emplace(alias, shapes.at(name));
  for (const auto& [name, shape] : whole_shapes) shapes[name] = shape;
  struct Range {
    std::int64_t begin, end;
    Tensor t;
  };
  // (parameter, suffix, dimension or -1 for flat elements)
  std::map<std::tuple<std::string, std::string, int>, std::vector<Range>> ranges;
  NamedTensors out;
  for (const auto& [key, t] : tensors) {
    const std::optional<RangeKey> r = parse_range_key(key, shapes);
    if (!r) {
      out.emplace_back(key, t);
      continue;
    }
    const Shape& shape = shapes.at(r->parameter);
    if (r->dim < 0) {
      DTRAIN_CHECK(t.dim() == 1 && t.numel() == r->end - r->begin, "{}: '{}' holds {} elements", origin, key,
                   t.numel());
    } else {
      DTRAIN_CHECK(r->dim < static_cast<int>(shape.size()) && t.dim() == static_cast<std::int64_t>(shape.size()) &&
                       t.size(r->dim) == r->end - r->begin,
                   "{}: '{}' has shape {}, not a slice of {}", origin, key, shape_str(t.shape()), shape_str(shape));
    }
    ranges[{r->parameter, r->suffix, r->dim}].push_back({r->begin, r->end, t});
  }
  for (auto& [what, parts] : ranges) {
    const auto& [name, suffix, dim] = what;
    std::sort(parts.begin(), parts.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    const Shape& shape = shapes.at(name);
    std::int64_t numel = 1;
    for (std::int64_t d : shape) numel *= d;
    const std::int64_t extent = dim < 0 ? numel : shape[static_cast<std::size_t>(dim)];
    std::int64_t at = 0;
    std::vector<Tensor> pieces;
    for (const Range& r : parts) {
      DTRAIN_CHECK(r.begin == at, "{}: the saved ranges of '{}{}' leave out or repeat elements at {}", origin, name,
                   suffix, at);
      at = r.end;
      pieces.push_back(r.t);
    }
    DTRAIN_CHECK(at == extent, "{}: the saved ranges of '{}{}' end at {} of {}", origin, name, suffix, at, extent);
    out.emplace_back(name + suffix, dim < 0 ? cat(pieces, 0).reshape(shape) : cat(pieces, dim));
  }
  return out;
}

namespace {

// An optimizer's state (Optimizer::state or state_view) keyed by parameter name.
NamedTensors name_entries(const NamedTensors& state, const std::vector<std::string>& names) {
  NamedTensors out;
  for (auto& [key, t] : state) {
    if (key == "lr" || key == "steps") {
      out.emplace_back(key, t);
    } else if (key == "updates") {
      const std::vector<std::int64_t> counts = t.to_vector<std::int64_t>();
      for (std::size_t i = 0; i < names.size(); ++i) {
        out.emplace_back(names[i] + "/updates", Tensor::scalar(static_cast<double>(counts[i]), {DType::i64}));
      }
    } else {
      const auto [buffer, index] = split_indexed(key);
      out.emplace_back(names.at(index) + "/" + buffer, t);
    }
  }
  return out;
}

// A tied weight's optimizer entries under each of its names too, as its values are in the
// state dict: a pipeline stage that holds only its later module finds them by that name.
NamedTensors with_aliases(NamedTensors entries, const nn::Module& module) {
  const auto aliases = module.parameter_aliases();
  if (aliases.empty()) return entries;
  const std::size_t n = entries.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::string key = entries[i].first;
    const auto slash = key.find('/');
    if (slash == std::string::npos) continue;
    for (const auto& [alias, name] : aliases) {
      if (key.compare(0, slash, name) == 0 && slash == name.size()) {
        entries.emplace_back(alias + key.substr(slash), entries[i].second);
      }
    }
  }
  return entries;
}

}  // namespace

NamedTensors named_optimizer_state(const optim::Optimizer& optimizer, const nn::Module& module) {
  return name_entries(optimizer.state(), parameter_names(optimizer, module));
}

void load_named_optimizer_state(optim::Optimizer& optimizer, const nn::Module& module, const NamedTensors& tensors,
                                const std::string& origin) {
  const std::vector<std::string> names = parameter_names(optimizer, module);
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < names.size(); ++i) index.emplace(names[i], i);
  NamedTensors state;
  std::vector<std::int64_t> updates(names.size(), -1);
  std::set<std::string> counters;
  for (const auto& [key, t] : tensors) {
    if (key == "lr" || key == "steps") {
      // Every part of the model saves them alike: the first is taken.
      if (counters.insert(key).second) state.emplace_back(key, t);
      continue;
    }
    const auto slash = key.rfind('/');
    if (slash == std::string::npos || key.rfind(kScalerPrefix, 0) == 0) continue;
    const auto it = index.find(key.substr(0, slash));
    if (it == index.end()) continue;  // another part's parameter
    const std::string what = key.substr(slash + 1);
    if (what == "updates") {
      DTRAIN_CHECK(t.numel() == 1, "{}: '{}' must hold one count", origin, key);
      updates[it->second] = static_cast<std::int64_t>(t.item());
    } else {
      state.emplace_back(fmt::format("{}.{}", what, it->second), t);
    }
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    DTRAIN_CHECK(updates[i] >= 0, "{}: no optimizer state for parameter '{}' (a different model or optimizer?)", origin,
                 names[i]);
  }
  state.emplace_back("updates", Tensor::from_vector(updates, {static_cast<std::int64_t>(updates.size())}));
  try {
    optimizer.load_state(state);
  } catch (const Error& e) {
    DTRAIN_FAIL("{}: {}", origin, e.what());
  }
}

// ---- saving ------------------------------------------------------------------------

struct Checkpointer::Snapshot {
  std::int64_t step = 0;
  NamedTensors model, optimizer;
  NamedTensors rank_state;  // CheckpointPlan::rank_state, host copies
  checkpoint::RankRecord record;
  checkpoint::Manifest manifest;  // rank 0: all but the files
  std::vector<int> absent;        // rank 0: ranks that left the job (CheckpointPlan::absent_ranks)
  int fault_save = 0;             // which save of this process this is (fault injection)
};

struct Checkpointer::Writer {
  std::thread thread;
  std::string error;  // the last save's failure on this rank ("" when it succeeded)
  std::atomic<bool> cancel{false};
  // The last snapshot's host buffers, for the next one to copy into (model, then optimizer
  // entries); handed back by the writer thread when its write is done.
  std::vector<Tensor> pool;
  mutable std::mutex mu;
  SaveTimes times;
  int saves = 0;

  void join() {
    if (thread.joinable()) thread.join();
  }
};

Checkpointer::Checkpointer(CheckpointOptions options, dist::Strategy& strategy)
    : options_(std::move(options)),
      strategy_(strategy),
      plan_(strategy.checkpoint_plan()),
      writer_(std::make_unique<Writer>()) {
  DTRAIN_CHECK(options_.every >= 0, "checkpoint: every must be >= 0 (0: at epoch ends only), got {}", options_.every);
  DTRAIN_CHECK(options_.keep >= 0, "checkpoint: keep must be >= 0 (0: all), got {}", options_.keep);
  DTRAIN_CHECK(
      options_.resume.empty() || options_.resume == "auto" || !options_.dir.empty() || fs::exists(options_.resume),
      "checkpoint: --resume {}: no such checkpoint", options_.resume);
  DTRAIN_CHECK(options_.resume != "auto" || !options_.dir.empty(),
               "checkpoint: --resume auto needs a checkpoint directory");
  DTRAIN_CHECK(options_.every == 0 || plan_.step_saves,
               "checkpoint: this {} job can save only at the end of an epoch, where its ranks meet: drop "
               "--checkpoint-every",
               strategy_.name());
}

Checkpointer::~Checkpointer() {
  // Reached with a save in flight only on the way out of an error: rank 0 stops waiting for
  // ranks that may be gone (that checkpoint is then not committed; the previous one stands).
  writer_->cancel = true;
  writer_->join();
  if (!writer_->error.empty()) spdlog::error("{}", writer_->error);
}

SaveTimes Checkpointer::last_save() const {
  std::lock_guard lock(writer_->mu);
  return writer_->times;
}

void Checkpointer::save(const optim::Optimizer& optimizer, const optim::LossScaler& scaler,
                        const checkpoint::TrainingPosition& position, const std::vector<double>& epoch_sums,
                        const std::string& model_summary) {
  check_slices_named(plan_, "saving");
  DTRAIN_CHECK(!options_.dir.empty(), "checkpoint: save() needs a checkpoint directory");
  // What a resume would refuse is refused here, before anything is written.
  DTRAIN_CHECK(position.epoch >= 1 && position.updates_per_epoch >= 1 && position.step_in_epoch >= 0 &&
                   position.step_in_epoch <= position.updates_per_epoch && position.epochs >= 1 &&
                   position.batch_size >= 1 && position.global_step >= 0,
               "checkpoint: impossible training position (epoch {}, update {} of {}, {} epochs, batch {}, step {})",
               position.epoch, position.step_in_epoch, position.updates_per_epoch, position.epochs, position.batch_size,
               position.global_step);
  const auto start_time = Clock::now();
  const checkpoint::CheckpointStore store(options_.dir);
  // Rank 0 clears what crashed saves left before any rank starts this one (the collective
  // below orders it before the others' writes).
  if (plan_.rank == 0 && !cleaned_) {
    store.remove_incomplete();
    cleaned_ = true;
  }
  const std::int64_t step = finish_and_agree(position.global_step);

  Snapshot s;
  s.step = step;
  // The live tensors: a synchronous save writes them before training changes them; an
  // asynchronous one copies them into host memory first.
  if (!plan_.part.empty() && plan_.saves_model) {
    s.model = plan_.model_share ? plan_.model_share() : strategy_.module().state_dict();
  }
  if (!plan_.part.empty() && plan_.saves_optimizer) {
    s.optimizer =
        plan_.optimizer_share
            ? plan_.optimizer_share(optimizer)
            : with_aliases(name_entries(optimizer.state_view(), parameter_names(optimizer, strategy_.module())),
                           strategy_.module());
    for (auto& [name, t] : scaler.state()) s.optimizer.emplace_back(kScalerPrefix + name, t);
  }
  if (plan_.slice_entries) {  // tensor parallelism: slices of whole tensors, named by their place
    s.model = plan_.slice_entries(std::move(s.model));
    s.optimizer = plan_.slice_entries(std::move(s.optimizer));
  }
  if (options_.async) {
    NamedTensors all = std::move(s.model);
    const std::size_t model_entries = all.size();
    all.insert(all.end(), std::make_move_iterator(s.optimizer.begin()), std::make_move_iterator(s.optimizer.end()));
    copy_into_host(all, writer_->pool);
    s.model.assign(std::make_move_iterator(all.begin()),
                   std::make_move_iterator(all.begin() + static_cast<std::ptrdiff_t>(model_entries)));
    s.optimizer.assign(std::make_move_iterator(all.begin() + static_cast<std::ptrdiff_t>(model_entries)),
                       std::make_move_iterator(all.end()));
  }
  if (plan_.rank_state) {
    for (auto& [name, t] : plan_.rank_state()) s.rank_state.emplace_back(name, host_copy(t));
  }
  s.record = own_record();
  s.record.epoch_sums = epoch_sums;
  if (plan_.rank == 0) {
    s.manifest = {.created = utc_now(),
                  .model = model_summary,
                  .job = {.strategy = strategy_.name(),
                          .world_size = plan_.ranks,
                          .stages = plan_.stages,
                          .replicas = plan_.replicas,
                          .servers = plan_.servers,
                          .mesh = mesh_axes(plan_)},
                  .position = position,
                  .files = {}};
    s.manifest.position.global_step = step;
    if (plan_.absent_ranks) s.absent = plan_.absent_ranks();
  }
  start(std::move(s));
  if (plan_.after_snapshot) plan_.after_snapshot(step);
  std::lock_guard lock(writer_->mu);
  writer_->times.held_s = seconds_since(start_time);
}

checkpoint::RankRecord Checkpointer::own_record() const {
  const Generator& gen = default_generator();
  checkpoint::RankRecord r;
  r.rank = plan_.rank;
  r.rng_seed = gen.seed();
  r.rng_offset = gen.offset();
  return r;
}

void Checkpointer::start(Snapshot s) {
  s.fault_save = ++writer_->saves;
  {
    std::lock_guard lock(writer_->mu);
    writer_->times = {};
  }
  if (options_.async) {
    writer_->thread = std::thread([this, s = std::move(s)] {
      write(s);
      for (const auto& [name, t] : s.model) writer_->pool.push_back(t);
      for (const auto& [name, t] : s.optimizer) writer_->pool.push_back(t);
    });
  } else {
    write(s);
  }
}

void Checkpointer::save_share(std::int64_t step, checkpoint::NamedTensors share) {
  writer_->join();
  Snapshot s;
  s.step = step;
  std::set<std::string> seen;  // pieces repeat "lr", "steps" and a straddling parameter's updates
  for (auto& [name, t] : share) {
    if (seen.insert(name).second) s.optimizer.emplace_back(name, host_copy(t));
  }
  s.record = own_record();
  start(std::move(s));
}

void Checkpointer::write(const Snapshot& s) {
  const auto start = Clock::now();
  const checkpoint::CheckpointStore store(options_.dir);
  const fs::path dir = store.incomplete(s.step);
  checkpoint::RankRecord record = s.record;
  std::uint64_t bytes = 0;
  try {
    fs::create_directories(dir);
    const auto write_part = [&](const char* kind, const NamedTensors& tensors, const checkpoint::Metadata& metadata,
                                const std::string& part) {
      checkpoint::AtomicFile f(dir / part_file(kind, part));
      checkpoint::write_safetensors(f, tensors, metadata);
      f.commit();
      record.files.push_back(
          {.name = f.target().filename().string(), .bytes = f.bytes(), .xxh3 = f.checksum(), .rank = plan_.rank});
      bytes += f.bytes();
    };
    if (!s.model.empty()) write_part("model", s.model, {{"format", "pt"}}, plan_.part);
    fault::maybe_kill_in_save(plan_.rank, s.fault_save);
    if (!s.optimizer.empty()) write_part("optimizer", s.optimizer, {}, plan_.part);
    if (!s.rank_state.empty()) write_part("exchange", s.rank_state, {}, rank_part(plan_.rank));
    checkpoint::write_file_atomically(dir / fmt::format("rank-{}.json", plan_.rank), record.to_json());
    if (plan_.rank == 0) {
      const std::vector<checkpoint::RankRecord> records =
          store.wait_for_ranks(s.step, plan_.ranks, writer_->cancel, s.absent);
      checkpoint::Manifest manifest = s.manifest;
      for (const checkpoint::RankRecord& r : records) {
        manifest.files.insert(manifest.files.end(), r.files.begin(), r.files.end());
        const fs::path path = dir / fmt::format("rank-{}.json", r.rank);
        const std::vector<std::uint8_t> text = checkpoint::read_file_bytes(path);
        checkpoint::Checksum sum;
        sum.update(text.data(), text.size());
        manifest.files.push_back(
            {.name = path.filename().string(), .bytes = text.size(), .xxh3 = sum.hex(), .rank = r.rank});
      }
      const fs::path saved = store.commit(s.step, manifest, options_.keep);
      spdlog::info("checkpoint {} saved ({:.1f} MB, {:.2f} s)", saved.string(), static_cast<double>(bytes) / 1e6,
                   seconds_since(start));
    }
    std::lock_guard lock(writer_->mu);
    writer_->times.write_s = seconds_since(start);
    writer_->times.bytes = bytes;
  } catch (const std::exception& e) {
    // The others must not wait for this rank: its record says it failed. The previous
    // checkpoint is untouched (nothing is renamed until every rank is done).
    writer_->error = fmt::format("checkpoint {} failed on rank {}: {}", store.name_of(s.step), plan_.rank, e.what());
    record.error = e.what();
    try {
      checkpoint::write_file_atomically(dir / fmt::format("rank-{}.json", plan_.rank), record.to_json());
    } catch (const std::exception&) {
      // A disk too full for the record too: rank 0 waits until the job ends.
    }
  }
}

void Checkpointer::finish() { finish_and_agree(0); }

std::int64_t Checkpointer::finish_and_agree(std::int64_t step) {
  writer_->join();
  std::string error = std::move(writer_->error);
  writer_->error.clear();
  // Every rank learns whether any rank's save failed, and all stop together; and the
  // checkpoint takes rank 0's step (asynchronous workers count their own updates).
  Tensor t =
      Tensor::from_vector<double>({error.empty() ? 0.0 : 1.0, plan_.rank == 0 ? static_cast<double>(step) : 0.0}, {2});
  strategy_.reduce_sums(t);
  const std::vector<double> v = t.to_vector<double>();
  if (!error.empty()) DTRAIN_FAIL("{}", error);
  DTRAIN_CHECK(v[0] == 0,
               "a checkpoint save failed on another rank (see its message); the previous checkpoint "
               "is intact");
  return static_cast<std::int64_t>(v[1]);
}

}  // namespace dtrain::train
