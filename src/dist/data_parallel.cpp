#include "dtrain/dist/data_parallel.h"

#include "dist/reducer.h"
#include "dtrain/dist/nccl.h"

#include <algorithm>
#include <optional>
#include <unordered_set>

namespace dtrain::dist {
namespace {

// One line per parameter and buffer, e.g. "parameter 'fc.weight' [4, 3] f32".
std::vector<std::string> describe_state(const nn::Module& module) {
  std::vector<std::string> lines;
  for (const auto& [name, p] : module.named_parameters()) {
    lines.push_back(fmt::format("parameter '{}' {} {}", name, shape_str(p.shape()), dtype_name(p.dtype())));
  }
  for (const auto& [name, b] : module.named_buffers()) {
    lines.push_back(fmt::format("buffer '{}' {} {}", name, shape_str(b.shape()), dtype_name(b.dtype())));
  }
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  return lines;
}

// Replaces `text` on every rank by root's. `device`: where comm takes tensors.
void broadcast_string(Communicator& comm, Device device, std::string& text, int root) {
  Tensor length = Tensor::full({1}, static_cast<double>(text.size()), {DType::i64, device});
  comm.broadcast(length, root);
  const auto n = length.item<std::int64_t>();
  if (n == 0) {
    text.clear();
    return;
  }
  Tensor bytes = comm.rank() == root ? Tensor::from_blob(text.data(), {n}, DType::u8).to(device)
                                     : Tensor::empty({n}, {DType::u8, device});
  comm.broadcast(bytes, root);
  bytes = bytes.to(Device::cpu());
  const std::uint8_t* p = bytes.data<std::uint8_t>();
  text.assign(p, p + n);
}

// The first way `mine` differs from rank 0's `reference`; empty when they are equal.
std::string first_difference(const std::vector<std::string>& reference, const std::vector<std::string>& mine,
                             int rank) {
  const std::size_t common = std::min(reference.size(), mine.size());
  for (std::size_t i = 0; i < common; ++i) {
    if (reference[i] != mine[i]) return fmt::format("rank 0 has {} where rank {} has {}", reference[i], rank, mine[i]);
  }
  if (reference.size() == mine.size()) return {};
  const bool rank0_longer = reference.size() > mine.size();
  return fmt::format("rank 0 has {} parameters and buffers, rank {} has {}; the first extra one, on rank {}, is {}",
                     reference.size(), rank, mine.size(), rank0_longer ? 0 : rank,
                     rank0_longer ? reference[common] : mine[common]);
}

// Throws the same error on every rank when some rank's parameters or buffers differ in
// name, shape or dtype from rank 0's, naming the lowest such rank and its first difference.
void check_same_structure(const nn::Module& module, Communicator& comm, Device device) {
  const std::vector<std::string> mine = describe_state(module);
  std::string reference = join_lines(mine);
  broadcast_string(comm, device, reference, 0);
  std::string detail = comm.rank() == 0 ? std::string() : first_difference(split_lines(reference), mine, comm.rank());

  Tensor differs = Tensor::full({1}, detail.empty() ? 0 : 1, {DType::i64, device});
  Tensor all = Tensor::empty({comm.size(), 1}, {DType::i64, device});
  comm.all_gather(differs, all);
  const auto flags = all.to(Device::cpu()).to_vector<std::int64_t>();
  std::vector<int> differing;
  for (int r = 0; r < comm.size(); ++r) {
    if (flags[static_cast<std::size_t>(r)] != 0) differing.push_back(r);
  }
  if (differing.empty()) return;
  broadcast_string(comm, device, detail, differing.front());
  DTRAIN_FAIL("DataParallel: the model differs between ranks ({} of {} differ from rank 0): {}", differing.size(),
              comm.size(), detail);
}

// Communicators work on contiguous tensors; a strided one goes through a copy.
void broadcast_in_place(Communicator& comm, Tensor t, int root) {
  if (t.is_contiguous()) {
    comm.broadcast(t, root);
    return;
  }
  Tensor packed = t.contiguous();
  comm.broadcast(packed, root);
  t.copy_(packed);
}

// The parameters the reducer averages: trainable, each once (a module registered twice
// shares its parameters), named by their first occurrence, in registration order.
std::vector<std::pair<std::string, Variable>> trainable_parameters(const nn::Module& module) {
  std::vector<std::pair<std::string, Variable>> out;
  std::unordered_set<const void*> seen;
  for (auto& [name, p] : module.named_parameters()) {
    if (p.requires_grad() && seen.insert(p.id()).second) out.emplace_back(name, p);
  }
  return out;
}

// The one device that holds all of the module's parameters and buffers (the CPU for a
// module with none).
Device state_device(const nn::Module& module) {
  std::optional<Device> device;
  auto visit = [&](const std::string& name, const Tensor& t) {
    if (!device) device = t.device();
    DTRAIN_CHECK(t.device() == *device,
                 "DataParallel: the model is on several devices ({} holds '{}', an earlier one is on {}); move it to "
                 "one device first",
                 t.device().str(), name, device->str());
  };
  for (const auto& [name, p] : module.named_parameters()) visit(name, p.data());
  for (const auto& [name, b] : module.named_buffers()) visit(name, b);
  return device.value_or(Device::cpu());
}

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
  const Device device = state_device(*module_);
  check_same_structure(*module_, *comm_, comm_device(*comm_, device));
  tensor_comm_ = communicator_for(comm_, device);
  for (auto& p : module_->parameters()) broadcast_in_place(*tensor_comm_, p.data(), 0);
  for (auto& [name, b] : module_->named_buffers()) broadcast_in_place(*tensor_comm_, b, 0);
  reducer_ = std::make_unique<Reducer>(trainable_parameters(*module_), tensor_comm_, options_, sync_);
}

DataParallel::~DataParallel() = default;

Variable DataParallel::forward(const Variable& x) { return module_->forward(x); }

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

DataParallel::NoSyncGuard::NoSyncGuard(DataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp.sync_ = false; }

DataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.sync_ = previous_; }

}  // namespace dtrain::dist
