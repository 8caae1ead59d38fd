// Main for the dist tests: the same Catch2 session on every rank; the job fails when any
// rank fails, and every rank reports it.
#include "dtrain/dist/comm/communicator.h"


int dtrain_catch_run(int argc, char** argv);

int main(int argc, char** argv) {
  auto world = dtrain::dist::world();  // initializes MPI when launched by mpirun
  int rc = dtrain_catch_run(argc, argv);
  dtrain::Tensor failed = dtrain::Tensor::full({1}, rc != 0 ? 1 : 0);
  world->all_reduce(failed, dtrain::dist::ReduceOp::Max);
  return failed.item() != 0 ? 1 : 0;
}
