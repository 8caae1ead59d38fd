#include "dtrain/dist/strategy/device_mesh.h"

#include "dtrain/comm/nccl.h"
#include "dtrain/core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

namespace dtrain::dist {
namespace {

bool valid_name(const std::string& name) {
  return !name.empty() &&
         std::all_of(name.begin(), name.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; });
}

std::string describe_dims(const std::vector<MeshDim>& dims) {
  std::vector<std::string> parts;
  for (const MeshDim& d : dims) parts.push_back(fmt::format("{}={}", d.name, d.size));
  return fmt::format("{}", fmt::join(parts, " x "));
}

std::string describe_blocks(const std::vector<MeshBlock>& blocks) {
  if (blocks.size() == 1) return describe_dims(blocks.front().dims);
  std::vector<std::string> parts;
  for (const MeshBlock& b : blocks) parts.push_back(fmt::format("{}[{}]", b.role, describe_dims(b.dims)));
  return fmt::format("{}", fmt::join(parts, " + "));
}

constexpr long long kHuge = 1LL << 40;

int block_size(const MeshBlock& b) {
  int n = 1;
  for (const MeshDim& d : b.dims) n *= d.size;
  return n;
}

void check_shape(const std::vector<MeshBlock>& blocks, int world_size) {
  DTRAIN_CHECK(!blocks.empty(), "device mesh: no blocks given");
  std::set<std::string> roles;
  long long total = 0;
  for (const MeshBlock& b : blocks) {
    DTRAIN_CHECK(valid_name(b.role), "device mesh: role '{}' must be a lowercase word (a-z, _)", b.role);
    DTRAIN_CHECK(roles.insert(b.role).second, "device mesh {}: role '{}' appears twice", describe_blocks(blocks),
                 b.role);
    DTRAIN_CHECK(!b.dims.empty(), "device mesh: role '{}' has no dimensions", b.role);
    std::set<std::string> names;
    long long size = 1;
    for (const MeshDim& d : b.dims) {
      DTRAIN_CHECK(valid_name(d.name), "device mesh: dimension '{}' must be a lowercase word (a-z, _)", d.name);
      DTRAIN_CHECK(names.insert(d.name).second, "device mesh {}: dimension '{}' appears twice in role '{}'",
                   describe_blocks(blocks), d.name, b.role);
      DTRAIN_CHECK(d.size >= 1, "device mesh {}: dimension '{}' must have size >= 1", describe_blocks(blocks), d.name);
      // Saturated so that the product cannot overflow (it fails below either way).
      size = size > kHuge / d.size ? kHuge : size * d.size;
    }
    total += size;
  }
  DTRAIN_CHECK(total == world_size,
               "device mesh {} holds {} ranks, the job has {} (change the shape, or launch as "
               "many ranks as it holds)",
               describe_blocks(blocks), total, world_size);
}

}  // namespace

DeviceMesh::DeviceMesh(CommunicatorPtr world, std::vector<MeshDim> dims, std::vector<MeshFlat> flat)
    : DeviceMesh(std::move(world), std::vector<MeshBlock>{{"train", std::move(dims)}}) {
  // Each flattened dimension: the ranks that share the coordinates along the others (the
  // color), ordered by their row-major index along its own.
  const std::size_t block_dims = blocks_[block_].dims.size();
  for (const MeshFlat& f : flat) {
    DTRAIN_CHECK(valid_name(f.name) && !has(f.name),
                 "device mesh {}: flattened dimension '{}' must be a new lowercase word", describe(), f.name);
    DTRAIN_CHECK(!f.dims.empty(), "device mesh {}: flattened dimension '{}' joins no dimensions", describe(), f.name);
    std::vector<bool> joined(block_dims, false);
    std::size_t last = 0;
    for (std::size_t i = 0; i < f.dims.size(); ++i) {
      const std::size_t k = index(f.dims[i]);
      DTRAIN_CHECK(k < block_dims && !joined[k] && (i == 0 || k > last),
                   "device mesh {}: flattened dimension '{}' must join distinct dimensions of the mesh in its order",
                   describe(), f.name);
      joined[k] = true;
      last = k;
    }
    int color = 0, coordinate = 0, size = 1;
    for (std::size_t k = 0; k < block_dims; ++k) {
      if (joined[k]) {
        coordinate = coordinate * dims_[k].size + coordinates_[k];
        size *= dims_[k].size;
      } else {
        color = color * dims_[k].size + coordinates_[k];
      }
    }
    dims_.push_back({f.name, size});
    coordinates_.push_back(coordinate);
    groups_.push_back(size == block_comm_->size() ? block_comm_ : block_comm_->split(color, coordinate));
  }
}

DeviceMesh::DeviceMesh(CommunicatorPtr world, std::vector<MeshBlock> blocks)
    : world_(std::move(world)), blocks_(std::move(blocks)) {
  DTRAIN_CHECK(world_ != nullptr, "device mesh: no communicator given");
  check_shape(blocks_, world_->size());
  // This rank's block, and its position inside it.
  int first = 0;
  while (world_->rank() >= first + block_size(blocks_[block_])) first += block_size(blocks_[block_++]);
  const int local = world_->rank() - first;
  block_comm_ = blocks_.size() == 1 ? world_ : world_->split(static_cast<int>(block_), local);

  const std::vector<MeshDim>& dims = blocks_[block_].dims;
  dims_ = dims;
  coordinates_.resize(dims.size());
  int rest = local;
  for (std::size_t k = dims.size(); k-- > 0;) {
    coordinates_[k] = rest % dims[k].size;
    rest /= dims[k].size;
  }
  // group(k): same coordinates along every other dimension (the color), ordered along k.
  for (std::size_t k = 0; k < dims.size(); ++k) {
    int color = 0;
    for (std::size_t j = 0; j < dims.size(); ++j) {
      if (j != k) color = color * dims[j].size + coordinates_[j];
    }
    // A dimension that spans the block is the block's communicator, not a copy of it.
    groups_.push_back(dims[k].size == block_comm_->size() ? block_comm_ : block_comm_->split(color, coordinates_[k]));
  }
}

int DeviceMesh::role_size(std::string_view role) const {
  for (const MeshBlock& b : blocks_) {
    if (b.role == role) return block_size(b);
  }
  return 0;
}

int DeviceMesh::role_first_rank(std::string_view role) const {
  int first = 0;
  for (const MeshBlock& b : blocks_) {
    if (b.role == role) return first;
    first += block_size(b);
  }
  DTRAIN_FAIL("device mesh {}: no role '{}'", describe(), role);
}

bool DeviceMesh::has(std::string_view dim) const {
  return std::any_of(dims_.begin(), dims_.end(), [&](const MeshDim& d) { return d.name == dim; });
}

std::size_t DeviceMesh::index(std::string_view dim) const {
  for (std::size_t k = 0; k < dims_.size(); ++k) {
    if (dims_[k].name == dim) return k;
  }
  DTRAIN_FAIL("device mesh {}: role '{}' has no dimension '{}'", describe(), role(), dim);
}

int DeviceMesh::size(std::string_view dim) const { return dims_[index(dim)].size; }
int DeviceMesh::coordinate(std::string_view dim) const { return coordinates_[index(dim)]; }
const CommunicatorPtr& DeviceMesh::group(std::string_view dim) const { return groups_[index(dim)]; }

const CommunicatorPtr& DeviceMesh::tensor_group(std::string_view dim, Device device) const {
  const std::size_t i = index(dim);
  if (!device.is_cuda() || groups_[i]->size() == 1) return groups_[i];
  CommunicatorPtr& made = device_groups_[{i, device.index}];
  if (!made) made = nccl_communicator(groups_[i], device);
  return made;
}

std::string DeviceMesh::describe() const { return describe_blocks(blocks_); }

std::vector<MeshDim> DeviceMesh::layout() const {
  std::vector<MeshDim> out;
  for (const MeshBlock& b : blocks_) {
    for (const MeshDim& d : b.dims) {
      if (d.size > 1) out.push_back({blocks_.size() == 1 ? d.name : b.role + "." + d.name, d.size});
    }
  }
  return out;
}

bool restorable_dimension(std::string_view name) {
  for (std::string_view known : {"dp", "dp_replicate", "dp_shard", "pp", "tp", "worker.dp", "ps.ps"}) {
    if (name == known) return true;
  }
  return false;
}

int ranks_per_host(Communicator& world) {
  const int local = host_rank();
  if (local < 0) return world.size();
  Tensor mine = Tensor::full({1}, static_cast<double>(local), {DType::f64});
  Tensor all = Tensor::empty({world.size(), 1}, {DType::f64});
  world.all_gather(mine, all);
  const std::vector<double> locals = all.to_vector<double>();
  const int per_host = static_cast<int>(*std::max_element(locals.begin(), locals.end())) + 1;
  bool consecutive = world.size() % per_host == 0;
  for (int r = 0; r < world.size(); ++r) consecutive = consecutive && locals[r] == r % per_host;
  DTRAIN_CHECK(consecutive,
               "hybrid sharding: the hosts do not hold equal runs of consecutive ranks (up to {} per host among {}); "
               "start as many ranks on every host, placed by slot (mpirun --map-by slot), or set DTRAIN_HOST_ID",
               per_host, world.size());
  return per_host;
}

}  // namespace dtrain::dist
