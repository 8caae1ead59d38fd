// DTRAIN_CUDA_CHECK turns a CUDA status into a dtrain::Error naming the call and the
// error; runs without a device (it needs only the runtime library).
#include "dtrain/core/cuda/check.h"

#include "dtrain/core/error.h"

#include <catch2/catch.hpp>

namespace dtrain::test {

using Catch::Contains;

namespace {
cudaError_t fails_with(cudaError_t status) { return status; }
}  // namespace

TEST_CASE("DTRAIN_CUDA_CHECK names the call, the error and its code", "[cuda]") {
  CHECK_NOTHROW([] { DTRAIN_CUDA_CHECK(fails_with(cudaSuccess)); }());
  CHECK_THROWS_AS([] { DTRAIN_CUDA_CHECK(fails_with(cudaErrorInvalidValue)); }(), Error);
  CHECK_THROWS_WITH([] { DTRAIN_CUDA_CHECK(fails_with(cudaErrorInvalidValue)); }(),
                    Contains("cuda: fails_with(cudaErrorInvalidValue) failed: cudaErrorInvalidValue (1): ") &&
                        Contains(cudaGetErrorString(cudaErrorInvalidValue)) && !Contains("restart"));
  // An error that poisons the context says so.
  CHECK_THROWS_WITH([] { DTRAIN_CUDA_CHECK(fails_with(cudaErrorIllegalAddress)); }(),
                    Contains("cudaErrorIllegalAddress") && Contains("restart the process"));
}

}  // namespace dtrain::test
