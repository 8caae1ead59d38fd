// What activation checkpointing (dtrain/autograd/checkpoint.h) needs from the backward
// engine (variable.cpp), private to autograd: the parameters a function reads while no graph
// is recorded, and a backward nested in another that leaves the leaves' hooks to the outer one.
#pragma once

#include "dtrain/autograd/variable.h"

#include <unordered_set>
#include <vector>

namespace dtrain::detail {

// While one lives on this thread, every op run without grad mode reports the leaves that
// require grad among its inputs: checkpoint's forward learns the parameters its function
// reads, which become inputs of its node, so that the outer backward counts their edges.
// An input that requires grad and is not a leaf throws (it came from a graph outside the
// function). Nested recorders: the innermost records.
class LeafRecorder {
 public:
  LeafRecorder();
  ~LeafRecorder();
  LeafRecorder(const LeafRecorder&) = delete;
  LeafRecorder& operator=(const LeafRecorder&) = delete;

  void see(const std::vector<Variable>& inputs);  // from Variable's op constructor
  // Each leaf once, in the order the function first read them.
  const std::vector<Variable>& leaves() const { return leaves_; }

 private:
  LeafRecorder* previous_;
  std::vector<Variable> leaves_;
  std::unordered_set<const void*> seen_;
};

// output.backward(grad_output) without firing any leaf's gradient hooks: run from inside a
// node's backward (a checkpoint's recomputed graph), whose leaves are that node's inputs in
// the outer pass, which fires their hooks once their last contribution, in or out of the
// node, is in.
void backward_without_hooks(Variable& output, const Tensor& grad_output);

}  // namespace dtrain::detail
