// DTRAIN_ISA_CLONES: a hot f32 loop compiled three times, for AVX-512, AVX2 and the
// baseline x86-64 (SSE2) that the portable build targets, with the best one for the CPU
// chosen once, when the library loads (GCC's target_clones, resolved as an ifunc). The
// portable build otherwise runs its element-wise, batch-norm and optimizer loops four
// lanes wide on CPUs that have sixteen. Where the data sits in cache that is what sets the
// pace (bench_ops on the AVX-512 Xeon: the fused SGD step over an MLP's parameters 36 ->
// 39 GB/s, over a ResNet-18's 16 -> 20, exp 1.65 -> 2.38 GB/s); where it streams from
// memory it is not (a ResNet-50 step's batch norm, 5% less time; plain additions, none).
//
// Every clone computes the same bits: the project builds with -ffp-contract=off (no clone
// fuses a multiply and an add that the baseline keeps apart), and without -ffast-math GCC
// vectorizes a float loop only where that keeps each element's operations in source order
// (libm calls stay the same scalar calls in every clone).
//
// Only for functions whose loops pay for the code: each clone is a full copy, and a call
// to one is never inlined. GCC resolves clones through ifunc, which needs an ELF target and
// glibc; nvcc (which sees these headers through the CUDA loop's offset calculator) and
// other compilers get the one baseline function.
#pragma once

#include <cstddef>  // any C++ library header defines __GLIBC__ on glibc, which the condition reads

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && \
    defined(__ELF__) && defined(__GLIBC__)
#define DTRAIN_ISA_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#else
#define DTRAIN_ISA_CLONES
#endif
