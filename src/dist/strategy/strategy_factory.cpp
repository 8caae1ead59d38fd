#include "dtrain/dist/strategy/strategy_factory.h"

#include "dtrain/core/error.h"
#include "dtrain/dist/strategy/parallel_dims.h"
#include "dtrain/dist/data_parallel/data_parallel_strategy.h"
#include "dtrain/dist/data_parallel/gradient_exchange.h"
#include "dtrain/dist/pipeline/pipeline_strategy.h"
#include "dtrain/dist/ps/ps_strategy.h"
#include "dtrain/dist/zero/zero_strategy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <mutex>

namespace dtrain::dist {

// ---- the spec -----------------------------------------------------------------

StrategySpec StrategySpec::parse(std::string_view text) {
  StrategySpec spec;
  spec.text_ = std::string(text);
  if (text.empty()) return spec;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    const std::size_t eq = item.find('=');
    const std::string key(item.substr(0, eq));
    const std::string value = eq == std::string_view::npos ? "" : std::string(item.substr(eq + 1));
    DTRAIN_CHECK(!key.empty(), "strategy spec '{}': an empty item (expected key or key=value, comma-separated)", text);
    DTRAIN_CHECK(eq == std::string_view::npos || !value.empty(), "strategy spec '{}': '{}=' has no value", text, key);
    DTRAIN_CHECK(spec.items_.emplace(key, value).second, "strategy spec '{}': '{}' is given twice", text, key);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return spec;
}

std::optional<std::string> StrategySpec::text_of(const std::string& key) {
  const auto it = items_.find(key);
  if (it == items_.end()) return std::nullopt;
  read_.insert(key);
  return it->second;
}

int StrategySpec::integer(const std::string& key, int fallback, int min) {
  const std::optional<std::string> v = text_of(key);
  if (!v || v->empty()) return fallback;
  int value = 0;
  const auto [end, error] = std::from_chars(v->data(), v->data() + v->size(), value);
  DTRAIN_CHECK(error == std::errc() && end == v->data() + v->size() && value >= min,
               "strategy spec '{}': {}={} must be an integer >= {}", text_, key, *v, min);
  return value;
}

double StrategySpec::number(const std::string& key, double fallback, bool zero_allowed) {
  const std::optional<std::string> v = text_of(key);
  if (!v || v->empty()) return fallback;
  double value = 0;
  const auto [end, error] = std::from_chars(v->data(), v->data() + v->size(), value);
  DTRAIN_CHECK(error == std::errc() && end == v->data() + v->size() && (value > 0 || (zero_allowed && value == 0)),
               "strategy spec '{}': {}={} must be a {} number", text_, key, *v,
               zero_allowed ? "non-negative" : "positive");
  return value;
}

bool StrategySpec::flag(const std::string& key, bool fallback) {
  const std::optional<std::string> v = text_of(key);
  if (!v) return fallback;
  if (v->empty() || *v == "1" || *v == "true") return true;
  DTRAIN_CHECK(*v == "0" || *v == "false", "strategy spec '{}': {}={} must be 0, 1, true or false", text_, key, *v);
  return false;
}

std::vector<std::string> StrategySpec::unread() const {
  std::vector<std::string> keys;
  for (const auto& [key, value] : items_) {
    if (!read_.contains(key)) keys.push_back(key);
  }
  return keys;
}

// ---- the built-in kinds ---------------------------------------------------------

namespace {

DataParallelStrategyOptions data_parallel_options(StrategySpec& spec) {
  DataParallelStrategyOptions o;
  o.data_parallel.bucket_bytes = static_cast<std::size_t>(spec.number("bucket_mb", 4.0) * (1 << 20));
  o.data_parallel.overlap = spec.flag("overlap", true);
  o.data_parallel.gradient_exchange = spec.text_of("exchange").value_or("all_reduce");
  o.sync_batch_norm = spec.flag("sync_bn");
  return o;
}

// The value of `key`: non-negative integers separated by ':' (`what` they are, for the error).
std::vector<int> index_list(StrategySpec& spec, const std::string& key, const char* what) {
  const std::string text = spec.text_of(key).value_or("");
  std::vector<int> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = text.find(':', start);
    const std::string part = text.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    int value = -1;
    const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), value);
    DTRAIN_CHECK(error == std::errc() && end == part.data() + part.size() && value >= 0,
                 "strategy spec '{}': {}={} must be {} separated by ':'", spec.text(), key, text, what);
    out.push_back(value);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

std::shared_ptr<Strategy> make_local(StrategySpec& spec, const CommunicatorPtr& world, Device device,
                                     const StrategyHints&) {
  spec.flag("local");
  DTRAIN_CHECK(world->size() == 1, "strategy spec '{}': local trains one process, the job has {} ranks (use dp)",
               spec.text(), world->size());
  return std::make_shared<LocalStrategy>(device);
}

// The spec's dimensions (parallel_dims.h); `hybrid` asks the world for its hosts.
ParallelDims dims_of(StrategySpec& spec, const CommunicatorPtr& world) {
  return parse_parallel_dims(spec, world->size(), [&] { return ranks_per_host(*world); });
}

// Gradient exchange under ZeRO is a codec times the reduce-scatter: fp16 and bf16 travel as
// 16-bit shares of the reduce-scatter itself (`wire`); any other kind of the registry
// (PowerSGD) averages the whole bucket, each rank keeping its chunk (`codec`), which needs
// the whole gradients that stages 1 and 2 hold. Refused when parsed, naming the keys.
void zero_codec(StrategySpec& spec, const std::string& exchange, int zero, DType& wire, std::string& codec) {
  if (exchange == "fp16" || exchange == "bf16") {
    wire = exchange == "fp16" ? DType::f16 : DType::bf16;
    return;
  }
  // Built once over this process alone, which parses the kind and its options (naming the
  // known kinds) before any communication.
  const GradientExchangePtr probe = make_gradient_exchange(exchange, single_process_communicator());
  if (exchange.substr(0, exchange.find(':')) == "all_reduce") return;  // the plain reduce-scatter
  DTRAIN_CHECK(zero <= 2,
               "strategy spec '{}': exchange={} with zero={}: it compresses whole gradient matrices, which zero=3 "
               "never holds; give zero=1 or 2 (or fp16/bf16 shares)",
               spec.text(), exchange, zero);
  codec = exchange;
}

// ZeRO-3's gather units, which are its gradient buckets too: sized by gather_mb (0: a unit
// per layer), and bucket_mb refused; below stage 3, gather_mb refused.
std::size_t gather_unit_bytes(StrategySpec& spec, int zero) {
  if (zero < 3) {
    DTRAIN_CHECK(!spec.has("gather_mb"),
                 "strategy spec '{}': gather_mb sizes stage 3's gather units, and zero={} gathers no layers",
                 spec.text(), zero);
    return 0;
  }
  DTRAIN_CHECK(!spec.has("bucket_mb"),
               "strategy spec '{}': at zero=3 the gradient buckets are the gather units; size them with gather_mb, "
               "not bucket_mb",
               spec.text());
  return static_cast<std::size_t>(spec.number("gather_mb", 4.0, /*zero_allowed=*/true) * (1 << 20));
}

// A strategy over `mesh` given the hints' tensor-parallel plan when the mesh has tp > 1.
std::shared_ptr<Strategy> with_tensor_parallel(std::shared_ptr<Strategy> strategy, const ParallelDims& dims,
                                               const DeviceMesh& mesh, Device device, const StrategySpec& spec,
                                               const StrategyHints& hints) {
  if (dims.tp == 1) return strategy;
  DTRAIN_CHECK(hints.tensor_parallel_plan.has_value(),
               "strategy spec '{}': tp={} needs the model's tensor-parallel plan (StrategyHints::tensor_parallel_plan; "
               "dist::gpt_tensor_parallel_plan for nn::gpt)",
               spec.text(), dims.tp);
  strategy->set_tensor_parallel(mesh.tensor_group("tp", device), *hints.tensor_parallel_plan,
                                {.sequence_parallel = dims.sp});
  return strategy;
}

std::shared_ptr<Strategy> make_data_parallel(StrategySpec& spec, const CommunicatorPtr& world, Device device,
                                             const StrategyHints& hints) {
  const ParallelDims dims = dims_of(spec, world);  // dp and tp (the kind is chosen only when no pp or zero is given)
  const DataParallelStrategyOptions options = data_parallel_options(spec);
  if (world->size() == 1) return std::make_shared<LocalStrategy>(device);
  const auto mesh = dims.mesh(world);
  return with_tensor_parallel(std::make_shared<DataParallelStrategy>(mesh, device, options), dims, *mesh, device, spec,
                              hints);
}

std::shared_ptr<Strategy> make_pipeline(StrategySpec& spec, const CommunicatorPtr& world, Device device,
                                        const StrategyHints& hints) {
  const ParallelDims dims = dims_of(spec, world);
  PipelineOptions o;
  o.stages = dims.pp;
  const int dp = dims.dp();
  o.zero = dims.zero;
  o.micro_batches = spec.integer("micro", o.micro_batches);
  o.schedule = parse_schedule(spec.text_of("schedule").value_or("1f1b"));
  o.virtual_stages =
      o.schedule == PipelineSchedule::Interleaved ? spec.integer("virtual", 2, 2) : fixed_virtual_stages(o.schedule);
  if (spec.has("cuts")) o.cuts = index_list(spec, "cuts", "layer indices");
  const std::string balance = spec.text_of("balance").value_or("params");
  DTRAIN_CHECK(balance == "params" || balance == "time", "strategy spec '{}': balance={} must be params or time",
               spec.text(), balance);
  if (balance == "time") {
    o.balance = PipelineOptions::Balance::Time;
    DTRAIN_CHECK(!hints.example_shape.empty(),
                 "strategy spec '{}': balance=time needs the shape of an example "
                 "(StrategyHints::example_shape) to time the stages on",
                 spec.text());
    // One micro-batch of the size training will use.
    const std::int64_t rows =
        std::max<std::int64_t>(hints.batch_size / dp / std::max(hints.accumulate, 1) / o.micro_batches, 1);
    Shape shape{rows};
    shape.insert(shape.end(), hints.example_shape.begin(), hints.example_shape.end());
    o.profile_input = Tensor::zeros(shape);
  }
  o.recompute = spec.flag("recompute");
  if (spec.has("recompute_stages")) o.recompute_stages = index_list(spec, "recompute_stages", "stage indices");
  const std::size_t units = gather_unit_bytes(spec, o.zero);  // before data_parallel_options reads bucket_mb
  if (o.zero == 3) o.unit_bytes = units;
  o.data_parallel = data_parallel_options(spec);
  std::string& exchange = o.data_parallel.data_parallel.gradient_exchange;
  if (o.zero > 0 && exchange != "all_reduce") {
    zero_codec(spec, exchange, o.zero, o.wire, o.codec);
    exchange = "all_reduce";  // the replicas' exchange is the reduce-scatter with that codec
  }
  const auto mesh = dims.mesh(world);
  return with_tensor_parallel(std::make_shared<PipelineStrategy>(mesh, device, std::move(o)), dims, *mesh, device, spec,
                              hints);
}

std::shared_ptr<Strategy> make_parameter_server(StrategySpec& spec, const CommunicatorPtr& world, Device device,
                                                const StrategyHints& hints) {
  // Refused before the servers' mesh is built (a collective), naming the key.
  for (const char* key : {"pp", "dp", "zero", "shard", "hybrid", "tp", "cp"}) {
    DTRAIN_CHECK(!spec.has(key),
                 "strategy spec '{}': parameter servers do not combine with {} (their mesh is the workers and the "
                 "servers: ps=S sets the servers, the other ranks are workers)",
                 spec.text(), key);
  }
  PsOptions o;
  o.servers = spec.integer("ps", 1);
  parse_ps_mode(spec.text_of("mode").value_or("async"), o);
  o.bucket_bytes = static_cast<std::size_t>(spec.number("bucket_mb", 1.0) * (1 << 20));
  o.staleness_lr = spec.flag("stale_lr");
  o.delay_compensation = spec.number("dc", 0.0);
  o.backup_workers = spec.integer("backup", 0, 0);
  if (o.mode != PsMode::Sync) {
    const double lost_s = spec.number("lost", std::chrono::duration<double>(hints.timeout).count() / 2, true);
    o.lost_after = std::chrono::milliseconds(static_cast<std::int64_t>(lost_s * 1000));
  }
  check_ps_options(o);
  DTRAIN_CHECK(world->size() > o.servers,
               "strategy spec '{}': {} server(s) need at least one worker besides: launch "
               "with mpirun -np {} or more",
               spec.text(), o.servers, o.servers + 1);
  return std::make_shared<ParameterServerStrategy>(world, device, o);
}

std::shared_ptr<Strategy> make_zero(StrategySpec& spec, const CommunicatorPtr& world, Device device,
                                    const StrategyHints& hints) {
  const ParallelDims dims = dims_of(spec, world);
  ZeroOptions o;
  o.stage = dims.zero;
  o.shard_ranks = dims.dp_shard;
  const std::size_t units = gather_unit_bytes(spec, o.stage);  // refuses the key that does not apply
  if (o.stage == 3) o.unit_bytes = units;
  else o.bucket_bytes = static_cast<std::size_t>(spec.number("bucket_mb", 4.0) * (1 << 20));
  o.overlap = spec.flag("overlap", true);
  const std::string exchange = spec.text_of("exchange").value_or("none");
  if (exchange != "none") zero_codec(spec, exchange, o.stage, o.wire, o.codec);
  const auto mesh = dims.mesh(world);
  return with_tensor_parallel(std::make_shared<ZeroStrategy>(mesh, device, o), dims, *mesh, device, spec, hints);
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, StrategyFactory> added;  // by the program, ahead of the built-in kinds
};

Registry& registry() {
  static Registry r;
  return r;
}

// The built-in kinds, most specific first: one line each.
const std::vector<std::pair<std::string, StrategyFactory>>& built_in() {
  static const std::vector<std::pair<std::string, StrategyFactory>> kinds{
      {"ps", make_parameter_server}, {"pp", make_pipeline},      {"zero", make_zero},
      {"dp", make_data_parallel},    {"tp", make_data_parallel}, {"local", make_local},
  };
  return kinds;
}

}  // namespace

void register_strategy(const std::string& key, StrategyFactory factory) {
  DTRAIN_CHECK(!key.empty() && factory != nullptr, "register_strategy: a key and a factory are needed");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.added[key] = std::move(factory);
}

std::shared_ptr<Strategy> make_strategy(std::string_view text, const CommunicatorPtr& world, Device device,
                                        const StrategyHints& hints) {
  DTRAIN_CHECK(world != nullptr, "make_strategy: no communicator given");
  StrategySpec spec = StrategySpec::parse(text);
  std::string kind;
  StrategyFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (const auto& [key, f] : r.added) {
      if (spec.has(key)) {
        kind = key;
        factory = f;
        break;
      }
    }
  }
  std::vector<std::string> kinds;
  for (const auto& [key, f] : built_in()) {
    kinds.push_back(key);
    if (!factory && (spec.has(key) || (key == "dp" && text.empty()))) {
      kind = key;
      factory = f;
    }
  }
  DTRAIN_CHECK(factory != nullptr, "strategy spec '{}' names no strategy: expected one of {} (or a registered kind)",
               text, fmt::join(kinds, ", "));
  spec.text_of(kind);  // the kind's own key is used, whether or not its factory reads a value
  std::shared_ptr<Strategy> strategy = factory(spec, world, device, hints);
  DTRAIN_CHECK(strategy != nullptr, "strategy spec '{}': the {} factory returned nothing", text, kind);
  const std::vector<std::string> unread = spec.unread();
  DTRAIN_CHECK(unread.empty(),
               "strategy spec '{}': {} not used by the {} strategy (see dtrain/dist/strategy/strategy_factory.h "
               "for its keys)",
               text, fmt::format("'{}'", fmt::join(unread, "', '")), kind);
  return strategy;
}

}  // namespace dtrain::dist
