// DeviceMesh: the job's ranks laid out along named dimensions, each with its communicator,
// built once from the job's shape (as torchtitan's ParallelDims over a DeviceMesh, or
// tf.distribute's cluster resolver for roles). Strategies read their groups from it instead
// of computing splits of their own.
//
// A mesh is one or more *blocks* of consecutive world ranks, each block a *role* with a
// grid of named dimensions, laid out row-major (the last dimension varies fastest):
//
//   // 4 ranks: 2 data-parallel replicas of a 2-stage pipeline; ranks 0,1 are replica 0.
//   dist::DeviceMesh mesh(world, {{"dp", 2}, {"pp", 2}});
//   mesh.coordinate("pp");  // this rank's stage
//   mesh.group("dp");       // the ranks that hold the same stage (this rank's replicas)
//
//   // 4 ranks: 3 workers (a "dp" grid) then 1 parameter server.
//   dist::DeviceMesh ps(world, {{"worker", {{"dp", 3}}}, {"ps", {{"ps", 1}}}});
//   ps.role();  // "worker" on ranks 0-2, "ps" on rank 3
//
// group(d) holds the ranks of this rank's block whose coordinates differ from this rank's
// only along d, ordered by their coordinate along d (so group(d)->rank() ==
// coordinate(d)). Names are lowercase words ("dp", "pp", "ps", "tp", "dp_shard"...); a
// dimension of size 1 is allowed (its group is this rank alone). A dimension that spans
// the block has the block's communicator as its group (the world's for one block), not a
// copy: no second communicator, and messages name it as the world.
//
// A flattened dimension joins several into one, as torchtitan flattens dp_replicate and
// dp_shard into dp: its size is their product, its group the ranks that differ only along
// them, its coordinate their row-major index.
//
//   dist::DeviceMesh mesh(world, {{"dp_replicate", 2}, {"dp_shard", 2}, {"pp", 1}},
//                         {{"dp", {"dp_replicate", "dp_shard"}}});
//   mesh.group("dp");  // all four replicas; group("dp_shard") the two of this shard group
//
// Construction is collective over the world: one split into blocks (none for a single
// block), then one split per dimension inside the block that does not span it. Every rank must pass the same
// shape; the block sizes must add up to the world's size (an error names the shape).
#pragma once

#include "dtrain/comm/communicator.h"

#include "dtrain/core/device.h"

#include <map>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

namespace dtrain::dist {

struct MeshDim {
  std::string name;
  int size = 1;
};

struct MeshBlock {
  std::string role;
  std::vector<MeshDim> dims;
};

struct MeshFlat {
  std::string name;
  std::vector<std::string> dims;  // of the block, in the block's order
};

class DeviceMesh {
 public:
  // One block, role "train", over every rank of `world`, with `flat` dimensions besides.
  DeviceMesh(CommunicatorPtr world, std::vector<MeshDim> dims, std::vector<MeshFlat> flat = {});
  // Blocks of consecutive ranks, in order.
  DeviceMesh(CommunicatorPtr world, std::vector<MeshBlock> blocks);

  const CommunicatorPtr& world() const { return world_; }
  // This rank's role, and the ranks of its block (the world itself for a single block).
  const std::string& role() const { return blocks_[block_].role; }
  const CommunicatorPtr& role_group() const { return block_comm_; }
  // The number of world ranks with `role` (0 for a role not in the mesh), and the first.
  int role_size(std::string_view role) const;
  int role_first_rank(std::string_view role) const;

  // Whether this rank's block has the dimension; size, coordinate and group throw naming
  // the mesh when it has not.
  bool has(std::string_view dim) const;
  int size(std::string_view dim) const;
  int coordinate(std::string_view dim) const;
  const CommunicatorPtr& group(std::string_view dim) const;
  // The group along `dim` for tensors on `device`: group(dim) itself for the CPU (and for a
  // dimension of one rank); on CUDA an NCCL communicator over it, made on first use and
  // kept, so that every strategy and layer sharing the dimension shares one (NCCL
  // communicators cost GPU memory and a watchdog each). The first call for a (dim, device)
  // is collective over the group: its ranks ask at the same point of the program.
  const CommunicatorPtr& tensor_group(std::string_view dim, Device device) const;

  // "dp=2 x pp=2", or "worker[dp=3] + ps[ps=1]" for several blocks (flattened dimensions
  // are not shown).
  std::string describe() const;
  // The dimensions of more than one rank, in the mesh's order, as a checkpoint records
  // them: a block's own names for one block, "role.dim" for several ("worker.dp", "ps.ps").
  // Empty for a mesh of one rank.
  std::vector<MeshDim> layout() const;

 private:
  std::size_t index(std::string_view dim) const;

  CommunicatorPtr world_;
  std::vector<MeshBlock> blocks_;
  std::size_t block_ = 0;
  CommunicatorPtr block_comm_;
  // This block's dims, then the flattened ones (their sizes the products), with this
  // rank's coordinate and group along each.
  std::vector<MeshDim> dims_;
  std::vector<int> coordinates_;
  std::vector<CommunicatorPtr> groups_;
  // tensor_group's NCCL communicators, by dimension index and CUDA device index.
  mutable std::map<std::pair<std::size_t, int>, CommunicatorPtr> device_groups_;
};

// The ranks of each host, when every host has as many and holds consecutive ranks (as
// mpirun places them by slot; throws otherwise, naming the remedy); collective over `world`.
// Hosts: MPI's shared-memory split, or DTRAIN_HOST_ID (communicator.h); one process
// without MPI is one host.
int ranks_per_host(Communicator& world);

// Whether a checkpoint saved on a mesh with dimension `name` (DeviceMesh::layout's names)
// restores onto any other mesh: the dimensions whose ranks save whole tensors or ranges of
// them by name (data parallel, its sharded and replicated parts, pipeline stages,
// parameter-server workers and servers). A dimension this dtrain does not reslice (a
// newer one's "tp", say) is refused at the restore, naming both meshes.
bool restorable_dimension(std::string_view name);

}  // namespace dtrain::dist
