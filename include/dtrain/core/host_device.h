// DTRAIN_HD marks a function that runs on the host and, compiled by nvcc, on a CUDA device
// too: the element-wise functors, Philox and the 16-bit float conversions are written once
// for both, so the CPU tests check the arithmetic the GPU runs.
#pragma once

#if defined(__CUDACC__)
#define DTRAIN_HD __host__ __device__
#else
#define DTRAIN_HD
#endif
