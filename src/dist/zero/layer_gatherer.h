// ZeRO stage 3's parameters (private to dist): sharded between the steps, whole only around
// the layers that use them, as PyTorch FSDP's fully_shard.
//
// The model's layers (the modules that own parameters) are grouped, in reverse
// registration order, into gather units of at least `unit_bytes` each (plan_units; a
// unit never splits a layer). Each unit is one of the reducer's gradient buckets, so the
// same flat layout (shard_layout.h) holds its parameters, its gradients and its optimizer
// state: rank r keeps chunk r of every unit's parameters, its only persistent copy.
//
// Forward hooks on every layer (Module::ForwardHooks): before a layer's forward its unit's
// chunks are all-gathered into the unit's flat buffer, which the parameters are views of,
// and the unit that runs next is prefetched (its all-gather started) while this one
// computes; after the unit's last layer the flat buffer's bytes are freed
// (Storage::release), except for the unit that backward needs first. The layer's output
// passes through an identity op whose backward gathers the unit again (and prefetches the
// unit backward reaches next); once every parameter of the unit has its gradient for that
// backward (the grad hooks), the unit's bytes are freed again. So at most the unit that
// computes and the one prefetched are whole at any time. A layer recomputed in backward
// (autograd/checkpoint.h) gathers its unit again in the recomputation, which keeps it whole
// for the backward that follows and prefetches nothing in forward order.
//
// The order is the same on every rank (the same model, the same hooks), so the collectives
// pair up. A parameter read outside its layer's forward and backward (a module that reaches
// into another's parameters) finds its bytes freed: the error names the parameter and why.
#pragma once

#include "dtrain/comm/communicator.h"
#include "dtrain/dist/data_parallel/gradient_exchange.h"
#include "dtrain/layers/module.h"

#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

// A gather unit as planned: its layers (registration order) and its parameters' names in
// backward order (the reducer's bucket).
struct UnitPlan {
  std::vector<nn::Module*> layers;
  std::vector<std::string> layer_names;
  std::vector<std::string> parameters;
  // Units whose parameters this unit's layers use too (a tied weight: a GPT's output
  // projection is its token embedding, sharded with the embedding's unit).
  std::vector<std::size_t> borrows;
};

// The units of `model`, in the order backward reaches them (the last layers first). A
// parameter that several layers register (a tied weight) belongs to the unit of the first,
// which the others' units borrow: gathered for their forward and kept whole through the
// backward until its gradients are complete, as FSDP keeps a tied weight in its root unit.
// Throws, naming the layer or parameter, for what stage 3 cannot gather: a frozen
// parameter, a layer whose parameters differ in dtype, a model without parameters.
std::vector<UnitPlan> plan_units(nn::Module& model, std::size_t unit_bytes);

class LayerGatherer {
 public:
  // `units`: plan_units' plan; `buckets`: the reducer's layouts of the same units (one
  // bucket per unit, in the same order); `flat`: per unit the padded flat buffer whose
  // views the parameters are (whole at construction: this rank's chunk is copied out, then
  // the bytes are freed). `comm`: the replicas (the model's tensors' communicator).
  LayerGatherer(CommunicatorPtr comm, std::vector<UnitPlan> units, const std::vector<BucketLayout>& buckets,
                std::vector<Tensor> flat, std::shared_ptr<nn::Module> model);
  ~LayerGatherer();
  LayerGatherer(const LayerGatherer&) = delete;
  LayerGatherer& operator=(const LayerGatherer&) = delete;

  std::size_t units() const { return units_.size(); }
  // This rank's persistent chunk of unit `u`'s parameters (the optimizer's slices view it).
  const Tensor& chunk(std::size_t u) const;
  // Makes every unit whole (their all-gathers run together).
  void gather_all();
  // Frees every whole unit (the end of a step: the optimizer is about to change the chunks).
  void release_all();
  // Under a pipeline a step runs several forwards before their backwards, and a backward's
  // B and W passes apart (zero-bubble), so a unit's gradients arriving says nothing about
  // whether another pass still needs its parameters: the gradients free nothing, and the
  // pipeline frees every unit after each pass instead (release_all), which the next pass
  // gathers again.
  void release_on_gradients(bool on) { release_on_gradients_ = on; }
  // The most units that were whole at once since the last call (the memory test's check).
  std::size_t take_peak_whole();

  // The hooks' entry points (public for the hook objects in the .cpp).
  void before_forward(std::size_t unit);
  Variable after_forward(std::size_t unit, nn::Module& layer, Variable output);
  void before_backward(std::size_t unit);
  void gradient_ready(std::size_t unit);

 private:
  struct Unit;
  void start_gather(std::size_t unit);
  void ensure_whole(std::size_t unit);
  void release(std::size_t unit);

  CommunicatorPtr comm_;
  std::shared_ptr<nn::Module> model_;
  std::vector<std::unique_ptr<Unit>> units_;
  bool release_on_gradients_ = true;
  std::size_t whole_ = 0, peak_whole_ = 0;  // units whose bytes are allocated (gathering or gathered)
};

}  // namespace dtrain::dist
