// The end of the MPI benches' main(): runs the bench on the world's ranks and turns an
// error into one line and exit code 1. Under mpirun a rank that fails alone ends the whole
// job (dist::abort_job), since the others would wait for it in a collective.
#pragma once

#include "dtrain/core/error.h"
#include "dtrain/dist/communicator.h"

#include <fmt/format.h>

#include <exception>
#include <string>

namespace dtrain::bench {

template <class Run>
int run_on_world(const char* program, Run run) {
  dist::CommunicatorPtr comm;
  std::string error;
  try {
    comm = dist::world();
    return run(comm);
  } catch (const dtrain::Error& e) {
    error = e.message();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (comm && comm->size() > 1) dist::abort_job(fmt::format("{}: error: {}", program, error));
  fmt::print(stderr, "{}: error: {}\n", program, error);
  return 1;
}

}  // namespace dtrain::bench
