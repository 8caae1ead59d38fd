#include "dist/zero/layer_gatherer.h"

#include "dist/zero/shard_layout.h"
#include "dtrain/autograd/checkpoint.h"
#include "dtrain/core/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace dtrain::dist {
namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// A module that owns parameters, as stage 3 gathers it.
struct Layer {
  std::string path;  // in the model ("" for the model itself)
  nn::Module* module;
  std::vector<std::string> parameters = {};  // full names, in registration order
  std::vector<std::string> borrowed = {};    // parameters of earlier layers it uses (tied), their first names
  DType dtype = DType::f32;
  std::size_t bytes = 0;

  std::string name() const { return path.empty() ? "(the model)" : path; }
};

void collect_layers(nn::Module& module, const std::string& path, std::vector<Layer>& out) {
  if (!module.own_parameters().empty()) out.push_back({.path = path, .module = &module});
  for (const auto& [name, child] : module.children()) collect_layers(*child, join(path, name), out);
}

}  // namespace

std::vector<UnitPlan> plan_units(nn::Module& model, std::size_t unit_bytes) {
  std::vector<Layer> layers;
  collect_layers(model, "", layers);
  DTRAIN_CHECK(!layers.empty(), "zero=3: the model has no parameters to shard");
  std::map<const void*, std::string> seen;  // parameter identity -> its name
  for (Layer& layer : layers) {
    layer.dtype = layer.module->own_parameters().front().second.dtype();
    for (const auto& [name, p] : layer.module->own_parameters()) {
      const std::string full = join(layer.path, name);
      const auto [it, fresh] = seen.emplace(p.id(), full);
      if (!fresh) {
        layer.borrowed.push_back(it->second);  // gathered with the layer that registered it first
        continue;
      }
      DTRAIN_CHECK(p.requires_grad(),
                   "zero=3 cannot gather '{}': it is frozen (requires no gradient), and stage "
                   "3 shards trained parameters only (use stage 2)",
                   full);
      DTRAIN_CHECK(p.dtype() == layer.dtype,
                   "zero=3 cannot gather layer '{}': its parameters are {} and {}, and a "
                   "layer is gathered as one flat buffer of one dtype",
                   layer.name(), dtype_name(layer.dtype), dtype_name(p.dtype()));
      layer.parameters.push_back(full);
      layer.bytes += p.data().nbytes();
    }
  }
  // Backward order: the last layer first; a unit closes once it holds unit_bytes, or
  // before a layer of another dtype.
  // A layer whose parameters are all borrowed joins the unit of the layer before it.
  std::vector<UnitPlan> units;
  std::size_t bytes = 0;
  std::vector<const Layer*> carried;  // such layers, waiting for that unit
  const Layer* previous = nullptr;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (it->parameters.empty()) {
      carried.push_back(&*it);
      continue;
    }
    if (units.empty() || bytes >= unit_bytes || previous->dtype != it->dtype) {
      units.emplace_back();
      bytes = 0;
    }
    previous = &*it;
    UnitPlan& unit = units.back();
    for (const Layer* c : carried) {  // later in the model than this layer
      unit.layers.insert(unit.layers.begin(), c->module);
      unit.layer_names.insert(unit.layer_names.begin(), c->name());
    }
    carried.clear();
    unit.layers.insert(unit.layers.begin(), it->module);
    unit.layer_names.insert(unit.layer_names.begin(), it->name());
    unit.parameters.insert(unit.parameters.end(), it->parameters.rbegin(), it->parameters.rend());
    bytes += it->bytes;
  }
  for (const Layer* c : carried) {  // the model's first layers own nothing: the last unit's
    units.back().layers.insert(units.back().layers.begin(), c->module);
    units.back().layer_names.insert(units.back().layer_names.begin(), c->name());
  }
  // Which unit holds each parameter; a layer's borrowed ones make its unit borrow theirs.
  std::map<std::string, std::size_t> unit_of;
  for (std::size_t u = 0; u < units.size(); ++u)
    for (const std::string& name : units[u].parameters) unit_of[name] = u;
  for (std::size_t u = 0; u < units.size(); ++u) {
    for (const Layer& layer : layers) {
      if (std::find(units[u].layers.begin(), units[u].layers.end(), layer.module) == units[u].layers.end()) continue;
      for (const std::string& name : layer.borrowed) {
        const std::size_t owner = unit_of.at(name);
        if (owner != u && std::find(units[u].borrows.begin(), units[u].borrows.end(), owner) == units[u].borrows.end())
          units[u].borrows.push_back(owner);
      }
    }
  }
  return units;
}

// One gather unit's state.
struct LayerGatherer::Unit {
  std::string released_why;  // what a read of its parameters while freed throws (made once)
  nn::Module* last;          // its last layer in registration order
  Tensor flat;               // the whole parameters (padded); its bytes exist only while whole
  Tensor chunk;              // this rank's, the only persistent copy
  enum class State { Released, Gathering, Whole } state = State::Released;
  WorkPtr work;                                     // the all-gather in flight
  int active = 0;                                   // the unit's layers inside their forward
  bool last_done = false;                           // its last layer finished its forward in this pass
  std::size_t parameters = 0, pending = 0;          // gradients still to come in this backward
  std::vector<std::size_t> borrows;                 // units whose parameters its layers use too (UnitPlan)
  std::shared_ptr<nn::Module::ForwardHooks> hooks;  // on each of `layers`, removed at the end
  std::vector<nn::Module*> layers;
};

namespace {

class UnitHooks final : public nn::Module::ForwardHooks {
 public:
  UnitHooks(LayerGatherer* gatherer, std::size_t unit) : gatherer_(gatherer), unit_(unit) {}
  void before(nn::Module&) override { gatherer_->before_forward(unit_); }
  Variable after(nn::Module& layer, Variable output) override {
    return gatherer_->after_forward(unit_, layer, std::move(output));
  }

 private:
  LayerGatherer* gatherer_;
  std::size_t unit_;
};

}  // namespace

LayerGatherer::LayerGatherer(CommunicatorPtr comm, std::vector<UnitPlan> units,
                             const std::vector<BucketLayout>& buckets, std::vector<Tensor> flat,
                             std::shared_ptr<nn::Module> model)
    : comm_(std::move(comm)), model_(std::move(model)) {
  DTRAIN_CHECK(units.size() == buckets.size() && units.size() == flat.size(),
               "zero=3: {} units but {} buckets and {} flat buffers", units.size(), buckets.size(), flat.size());
  std::map<std::string, Variable> params;
  for (auto& [name, p] : model_->named_parameters()) params.emplace(name, p);
  const int rank = comm_->rank(), ranks = comm_->size();
  for (std::size_t u = 0; u < units.size(); ++u) {
    auto unit = std::make_unique<Unit>();
    const UnitPlan& plan = units[u];
    const std::string name = plan.layer_names.size() == 1 ? fmt::format("layer '{}'", plan.layer_names.front())
                                                          : fmt::format("layers '{}' to '{}'", plan.layer_names.front(),
                                                                        plan.layer_names.back());
    unit->released_why = fmt::format(
        "zero=3: the parameters of {} are whole only inside those layers' forward and "
        "backward, and something else read them (a module using another module's parameters, or code outside the "
        "training step; such a model trains under stage 1 or 2)",
        name);
    unit->last = plan.layers.back();
    unit->borrows = plan.borrows;
    const std::int64_t chunk = flat[u].numel() / ranks;
    unit->chunk = flat[u].narrow(0, chunk * rank, chunk).clone();
    unit->flat = std::move(flat[u]);
    unit->parameters = unit->pending = buckets[u].members.size();
    units_.push_back(std::move(unit));
    release(u);
    const auto hooks = std::make_shared<UnitHooks>(this, u);
    for (nn::Module* layer : plan.layers) layer->add_forward_hooks(hooks);
    units_.back()->hooks = hooks;
    units_.back()->layers = plan.layers;
    for (const BucketLayout::Member& m : buckets[u].members) {
      params.at(m.name).register_grad_hook([this, u](Variable&) { gradient_ready(u); });
    }
  }
}

LayerGatherer::~LayerGatherer() {
  for (auto& [name, p] : model_->named_parameters()) p.clear_grad_hooks();
  for (auto& unit : units_) {
    for (nn::Module* layer : unit->layers) layer->remove_forward_hooks(unit->hooks.get());
  }
  for (auto& unit : units_) {
    if (unit->work) unit->work->wait();  // a prefetch still writes into the buffer
  }
}

const Tensor& LayerGatherer::chunk(std::size_t u) const { return units_.at(u)->chunk; }

void LayerGatherer::start_gather(std::size_t u) {
  Unit& x = *units_[u];
  x.flat.storage()->reallocate();
  Tensor out = x.flat.view({comm_->size(), x.chunk.numel()});
  if (trace::recording()) trace::instant(fmt::format("gather unit {}", u), "communication");
  x.work = comm_->all_gather_async(x.chunk, out);
  x.state = Unit::State::Gathering;
  peak_whole_ = std::max(peak_whole_, ++whole_);
}

void LayerGatherer::ensure_whole(std::size_t u) {
  Unit& x = *units_[u];
  if (x.state == Unit::State::Released) start_gather(u);
  if (x.state == Unit::State::Gathering) {
    trace::Span span("parameter all-gather wait", trace::Phase::Communication);
    x.work->wait();
    x.work.reset();
    x.state = Unit::State::Whole;
  }
}

void LayerGatherer::release(std::size_t u) {
  Unit& x = *units_[u];
  if (x.work) {  // never free a buffer a collective still writes
    x.work->wait();
    x.work.reset();
  }
  if (x.state != Unit::State::Released) --whole_;
  x.state = Unit::State::Released;
  x.flat.storage()->release(x.released_why);
}

void LayerGatherer::gather_all() {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (units_[u]->state == Unit::State::Released) start_gather(u);
  }
  for (std::size_t u = 0; u < units_.size(); ++u) ensure_whole(u);
}

void LayerGatherer::release_all() {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    Unit& x = *units_[u];
    if (x.state != Unit::State::Released) release(u);
    x.active = 0;
    x.last_done = false;
    x.pending = x.parameters;
  }
}

std::size_t LayerGatherer::take_peak_whole() {
  const std::size_t peak = peak_whole_;
  peak_whole_ = whole_;
  return peak;
}

void LayerGatherer::before_forward(std::size_t u) {
  ensure_whole(u);
  for (std::size_t b : units_[u]->borrows) ensure_whole(b);
  ++units_[u]->active;
  // Forward runs the units from the last to the first: prefetch the next one. Not in a
  // checkpoint's recomputation: backward comes next, and the identity op prefetches for it.
  if (!recomputing() && u > 0 && units_[u - 1]->state == Unit::State::Released) start_gather(u - 1);
}

Variable LayerGatherer::after_forward(std::size_t u, nn::Module& layer, Variable output) {
  Unit& x = *units_[u];
  --x.active;
  if (&layer == x.last) x.last_done = true;
  // Backward starts with unit 0: keep it whole when a backward can follow.
  if (x.active == 0 && x.last_done) {
    x.last_done = false;
    // A checkpoint's recomputation is followed at once by the backward through these layers:
    // the unit stays whole until its gradients are in (gradient_ready), or the pass ends.
    if (!(u == 0 && grad_enabled()) && !recomputing()) release(u);
    // A borrowed unit stays whole for the backward, until its gradients are complete
    // (gradient_ready); without one, it goes now unless its own layers run.
    if (!grad_enabled()) {
      for (std::size_t b : x.borrows)
        if (units_[b]->active == 0 && units_[b]->state != Unit::State::Released) release(b);
    }
  }
  if (!grad_enabled() || !output.requires_grad()) return output;
  Tensor data = output.data();
  return Variable(std::move(data), {std::move(output)}, [this, u](std::vector<Variable>& in, const Tensor& g) {
    before_backward(u);
    in[0].add_grad(g);
  });
}

void LayerGatherer::before_backward(std::size_t u) {
  ensure_whole(u);
  for (std::size_t b : units_[u]->borrows) ensure_whole(b);
  if (u + 1 < units_.size() && units_[u + 1]->state == Unit::State::Released) start_gather(u + 1);
}

void LayerGatherer::gradient_ready(std::size_t u) {
  if (!release_on_gradients_) return;
  Unit& x = *units_[u];
  if (--x.pending > 0) return;
  x.pending = x.parameters;
  release(u);
}

}  // namespace dtrain::dist
