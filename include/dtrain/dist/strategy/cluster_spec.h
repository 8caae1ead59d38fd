// Cluster spec: the roles of a parameter-server job as JSON, in the spirit of TensorFlow's
// TF_CONFIG, with mpirun still the launcher:
//   {"cluster": {"worker": ["host1:2222", "host2:2222"], "ps": ["host3:2222"]}}
// Entries are "host" or "host:port" (the port is only a name here: MPI carries the
// messages). Worker i is rank i and ps j is rank (workers + j), so mpirun's placement must
// put each rank on its entry's host ("localhost" matches any). Read from a file
// (train_mnist --cluster FILE) or the DTRAIN_CLUSTER environment variable.
#pragma once

#include "dtrain/comm/communicator.h"

#include <string>
#include <vector>

namespace dtrain::dist {

struct ClusterSpec {
  std::vector<std::string> workers;
  std::vector<std::string> ps;
};

// Parses `text` and checks it against a job of `world_size` ranks: valid JSON, an object
// with the one key "cluster" holding exactly "worker" (at least one entry) and "ps" (at
// least one), lists of non-empty strings, no entry twice, workers + ps == world_size.
// Throws dtrain::Error naming `source` (a file name or "DTRAIN_CLUSTER") and the field.
ClusterSpec parse_cluster_spec(const std::string& text, const std::string& source, int world_size);

// Reads and parses the file `path` (errors name it).
ClusterSpec read_cluster_spec(const std::string& path, int world_size);

// Collective over `world`: throws on every rank when some rank runs on another host than
// its entry names, naming the entry, the rank and both hosts.
void check_cluster_hosts(const ClusterSpec& spec, const std::string& source, Communicator& world);

}  // namespace dtrain::dist
