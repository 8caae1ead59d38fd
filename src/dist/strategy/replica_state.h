// The model's state across ranks, for wrappers that give every rank the same model
// (DataParallel, ParameterServer). Private to dist.
#pragma once

#include "dtrain/comm/communicator.h"
#include "dtrain/layers/module.h"

#include <string>
#include <utility>
#include <vector>

namespace dtrain::dist {

// Throws the same error on every rank ("<who>: the model differs between ranks ...") when
// some rank's parameters or buffers differ in name, shape or dtype from rank 0's, naming
// the lowest such rank and its first difference. `device`: where comm takes tensors.
void check_same_structure(const char* who, const nn::Module& module, Communicator& comm, Device device);

// Broadcasts `t` from `root` in place (a strided tensor goes through a contiguous copy).
void broadcast_in_place(Communicator& comm, Tensor t, int root);

// The trainable parameters, each once (a module registered twice shares its parameters),
// named by their first occurrence, in registration order.
std::vector<std::pair<std::string, Variable>> trainable_parameters(const nn::Module& module);

// The one device that holds all of the module's parameters and buffers (the CPU for a
// module with none); throws, prefixed by `who`, when they are on several.
Device state_device(const char* who, const nn::Module& module);

}  // namespace dtrain::dist
