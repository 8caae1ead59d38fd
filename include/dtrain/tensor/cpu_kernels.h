// Switches for the CPU backend's convolution and product kernels. They change speed; results
// agree to float rounding, except under Winograd convolutions (ConvAlgorithm), whose
// transforms add a few roundings more. Tests compare the settings.
#pragma once

namespace dtrain {

// Whether activations stay in oneDNN's blocked-channel layout from one layer to the next
// (see StorageLayout in storage.h). On by default; DTRAIN_CPU_BLOCKED=0 in the environment
// turns it off at start.
bool cpu_blocked_layout();
void set_cpu_blocked_layout(bool enabled);

// How weight gradients are computed: oneDNN's direct kernels, or im2col and oneDNN's GEMM
// over a few images at a time. Auto takes GEMM where the CPU lacks AVX-512, for kernels of
// 3x3 and smaller or a single input channel: there oneDNN 2.6's AVX2 direct kernels
// compute weight gradients at 10-60% of the core's peak (bench_ops --filter conv); with
// AVX-512 they reach 70-85%, and Auto keeps them. DTRAIN_CONV_WEIGHT_GRAD=direct|gemm sets
// it at start.
enum class ConvWeightGrad { Auto, Direct, Gemm };
ConvWeightGrad cpu_conv_weight_grad();
void set_cpu_conv_weight_grad(ConvWeightGrad mode);

// How 3x3 convolutions of stride 1 run: by oneDNN's direct kernels, or by its Winograd
// F(4x4, 3x3) kernels (AVX-512 only; ungrouped, undilated, padding of at most 1, f32
// products), which transform 6x6 input tiles and 3x3 filters so that each 4x4 output
// tile costs 36 products per channel pair instead of 144. Forward and backward together
// (bench/results/conv_winograd_layers.txt, speed over the direct kernels'): 1.05-2.0x on
// ResNet layers with 64 channels or more each way where a batch slice (the images one
// thread convolves) has the output positions of 32 whole 4x4 tiles or more (1.09-1.11x at
// exactly 32); below that 0.78-0.86x, with 16-32 channels 0.8-0.9x, on a 3-channel stem 0.56x.
// Their results carry their transforms' roundings: against an f64 reference, forward
// results and input gradients are off by up to 5e-6 of their scale on those layers (the
// direct kernels: 5e-7), weight gradients by as much as the direct kernels' (up to 3e-6).
// Auto takes Winograd where it applies with 64 channels and 512 output positions per slice
// (N * OH * OW); Winograd takes it wherever it applies; Direct never.
// DTRAIN_CPU_CONV_ALGO=auto|direct|winograd sets it at start.
enum class ConvAlgorithm { Auto, Direct, Winograd };
ConvAlgorithm cpu_conv_algorithm();
void set_cpu_conv_algorithm(ConvAlgorithm mode);
// Whether oneDNN has its Winograd kernels on this CPU (AVX-512).
bool cpu_has_winograd();

// How convolutions and matrix products of bf16 operands (autocast, autocast.h) run: on
// oneDNN's bf16 kernels, which multiply bf16 pairs with the CPU's bf16 instructions and sum
// in f32, or emulated: the operands widened to f32 exactly and the f32 kernels. Both form
// the same exact products and sum them in f32, in different orders (unless the emulation's
// convolutions take Winograd kernels, ConvAlgorithm above, with their transforms' roundings;
// tests that compare the two pin Direct or use shapes Auto leaves direct); results are rounded
// alike (to bf16 where cuDNN writes bf16). Auto takes the bf16 kernels only with AMX: on
// AVX-512 BF16 alone oneDNN 2.6's bf16 convolutions and matmuls run slower than the f32
// ones (0.7x and 0.5x on a Sapphire Rapids-class Xeon without AMX, bench_train --precision
// bf16), so there emulation is faster. Native takes them wherever the CPU has AVX-512 BF16
// (cpu_has_bf16_dot()); Emulated never. DTRAIN_CPU_BF16=auto|native|emulate sets it at start.
enum class Bf16Products { Auto, Native, Emulated };
Bf16Products cpu_bf16_products();
void set_cpu_bf16_products(Bf16Products mode);
bool cpu_has_bf16_dot();
// Whether bf16 products run on oneDNN's bf16 kernels now (the mode and the CPU).
bool cpu_native_bf16();

}  // namespace dtrain
