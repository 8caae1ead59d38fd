// What every rank's copy of a model must share before ranks train it together, and how
// rank 0's state reaches the others (DataParallel, ParameterServer).
#include "dist/strategy/replica_state.h"

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

}  // namespace

// Throws the same error on every rank when some rank's parameters or buffers differ in
// name, shape or dtype from rank 0's, naming the lowest such rank and its first difference.
void check_same_structure(const char* who, const nn::Module& module, Communicator& comm, Device device) {
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
  DTRAIN_FAIL("{}: the model differs between ranks ({} of {} differ from rank 0): {}", who, differing.size(),
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
Device state_device(const char* who, const nn::Module& module) {
  std::optional<Device> device;
  auto visit = [&](const std::string& name, const Tensor& t) {
    if (!device) device = t.device();
    DTRAIN_CHECK(t.device() == *device,
                 "{}: the model is on several devices ({} holds '{}', an earlier one is on {}); move it to "
                 "one device first",
                 who, t.device().str(), name, device->str());
  };
  for (const auto& [name, p] : module.named_parameters()) visit(name, p.data());
  for (const auto& [name, b] : module.named_buffers()) visit(name, b);
  return device.value_or(Device::cpu());
}
}  // namespace dtrain::dist
