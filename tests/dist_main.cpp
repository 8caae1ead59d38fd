// Main for the dist tests: the same Catch2 session on every rank; the job fails when any
// rank fails, and every rank reports it. It is skipped (exit code 77, tests/catch_impl.cpp)
// when every rank skipped every test case it ran, as the NCCL entry does without devices.
#include "dtrain/comm/communicator.h"

int dtrain_catch_run(int argc, char** argv);

int main(int argc, char** argv) {
  constexpr int kSkipExitCode = 77;
  auto world = dtrain::dist::world();  // initializes MPI when launched by mpirun
  const int rc = dtrain_catch_run(argc, argv);
  dtrain::Tensor failed = dtrain::Tensor::full({1}, rc != 0 && rc != kSkipExitCode ? 1 : 0);
  dtrain::Tensor skipped = dtrain::Tensor::full({1}, rc == kSkipExitCode ? 1 : 0);
  world->all_reduce(failed, dtrain::dist::ReduceOp::Max);
  world->all_reduce(skipped, dtrain::dist::ReduceOp::Min);
  if (failed.item() != 0) return 1;
  return skipped.item() != 0 ? kSkipExitCode : 0;
}
