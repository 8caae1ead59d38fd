// The CPU's peak f32 rate, measured: what model FLOPs utilisation (MFU) is a share of.
// A loop of independent fused multiply-adds in the widest vectors the CPU has (AVX-512,
// else AVX2 + FMA, else plain scalar code), run on every thread of dtrain's pool at once
// for about `seconds`: the rate no GEMM can beat at this thread count.
#pragma once

namespace dtrain::examples {

// FLOP/s (a fused multiply-add counts 2), over num_threads() threads.
double measure_peak_flops(double seconds = 0.2);
// "avx512", "avx2+fma" or "scalar": the loop measure_peak_flops runs here.
const char* peak_flops_isa();

}  // namespace dtrain::examples
