#include "dtrain/dist/data_parallel/data_parallel.h"

#include "dist/data_parallel/reducer.h"
#include "dist/strategy/replica_state.h"
#include "dtrain/comm/nccl.h"

namespace dtrain::dist {
namespace {

// Where the collectives of a comm's backend take tensors: NCCL's on the GPU, the others' on
// the CPU (the local group takes any device, and the CPU is always there).
Device comm_device(const Communicator& comm, Device model) { return comm.backend() == "nccl" ? model : Device::cpu(); }

// The communicator for the model's tensors: NCCL, built over `comm`, for a CUDA model on
// several ranks; `comm` itself otherwise.
CommunicatorPtr communicator_for(const CommunicatorPtr& comm, Device model) {
  if (model.is_cpu()) {
    DTRAIN_CHECK(comm->backend() != "nccl",
                 "DataParallel: the model is on the CPU but the communicator is NCCL, which takes CUDA tensors; pass "
                 "dist::world() or move the model to its GPU");
    return comm;
  }
  if (comm->backend() == "nccl" || comm->size() == 1) return comm;
  return nccl_communicator(comm, model);
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, CommunicatorPtr comm, DataParallelOptions options)
    : module_(std::move(module)), comm_(std::move(comm)), options_(options) {
  DTRAIN_CHECK(module_ != nullptr && comm_ != nullptr, "DataParallel: the module and the communicator must be given");
  DTRAIN_CHECK(options_.bucket_bytes > 0, "DataParallel: bucket_bytes must be positive");
  const Device device = state_device("DataParallel", *module_);
  check_same_structure("DataParallel", *module_, *comm_, comm_device(*comm_, device));
  tensor_comm_ = communicator_for(comm_, device);
  for (auto& p : module_->parameters()) broadcast_in_place(*tensor_comm_, p.data(), 0);
  for (auto& [name, b] : module_->named_buffers()) broadcast_in_place(*tensor_comm_, b, 0);
  GradientExchangePtr exchange = options_.exchange_factory
                                     ? options_.exchange_factory(tensor_comm_)
                                     : make_gradient_exchange(options_.gradient_exchange, tensor_comm_);
  DTRAIN_CHECK(exchange != nullptr, "DataParallel: the exchange factory returned nothing");
  reducer_ = std::make_unique<GradientReducer>(trainable_parameters(*module_), std::move(exchange),
                                               ReducerOptions{.bucket_bytes = options_.bucket_bytes,
                                                              .overlap = options_.overlap,
                                                              .communicate = options_.communicate,
                                                              .keep_buckets = options_.keep_gradients,
                                                              .buckets = options_.buckets},
                                               sync_);
}

DataParallel::~DataParallel() = default;

Variable DataParallel::forward(const Variable& x) { return module_->forward(x); }

void DataParallel::run_micro_batch(bool last, const std::function<void()>& body) {
  if (last) {
    body();
    return;
  }
  NoSyncGuard no_sync(*this);
  body();
}

void DataParallel::finish_gradient_sync() {
  if (sync_) reducer_->finish();
}

double DataParallel::check_replicas() {
  double local = 0;
  Device device = Device::cpu();
  for (const auto& p : module_->parameters()) {
    Tensor reference = p.data().clone();
    tensor_comm_->broadcast(reference, 0);
    const double d = max_abs_diff(p.data(), reference);
    if (!(d <= local)) local = d;  // NaN wins, so a broken replica is never reported as equal
    device = p.device();
  }
  Tensor worst = Tensor::full({1}, local, {DType::f64, comm_device(*tensor_comm_, device)});
  tensor_comm_->all_reduce(worst, ReduceOp::Max);
  return worst.to(Device::cpu()).item();
}

std::vector<std::pair<std::string, Tensor>> DataParallel::exchange_state() const {
  return reducer_->exchange().state();
}

void DataParallel::load_exchange_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  reducer_->exchange().load_state(state);
}

DataParallel::NoSyncGuard::NoSyncGuard(DataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp.sync_ = false; }

DataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.sync_ = previous_; }

}  // namespace dtrain::dist
