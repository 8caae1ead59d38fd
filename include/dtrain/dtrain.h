// Every public dtrain header, for programs that want the whole library in one include.
// The layers' own code never includes this (tools/check_layering.py forbids it: it reaches
// every layer). By layer, bottom up:
//   core      Device, Error and the checks, environment, logging, the thread pool, trace spans
//   tensor    Tensor, Storage, shapes, dtypes (f16/bf16), ops, the device stream, Upload,
//             memory stats
//   autograd  Variable, differentiable functions, attention (fused where a device can), the fused
//             linear cross-entropy, autocast, gradient checks, split backward, activation
//             checkpointing
//   layers    Module, Sequential, the layers, init, ready-made models
//   optim     Optimizer, SGD, Adam/AdamW, LARS, LAMB, LR schedules, gradient clipping, loss scaling
//   data      Dataset, MNIST, ImageFolder, tar shards, JPEG and transforms, Subset, TensorDataset,
//             samplers, DataLoader, token files
//   text      Tokenizers (bytes, dtrain's byte-level BPE, GPT-2's tiktoken ranks), GPT-2's
//             pre-tokenization, text corpora
//   dist      Communicator, NCCL, DataParallel, Strategy, SyncBatchNorm
//   train     Trainer (the training loop) and its observers, progress, metrics log,
//             TensorBoard event files
// Left out: dtrain/core/cuda/ (CUDA helpers that need the CUDA toolkit's headers). The
// lint test layering.umbrella fails when a public header is missing here.
#pragma once

#include "dtrain/config.h"

#include "dtrain/core/device.h"
#include "dtrain/core/environment.h"
#include "dtrain/core/error.h"
#include "dtrain/core/host_device.h"
#include "dtrain/core/log.h"
#include "dtrain/core/parallel.h"
#include "dtrain/core/trace.h"

#include "dtrain/tensor/cpu_kernels.h"
#include "dtrain/tensor/dtype.h"
#include "dtrain/tensor/fused_attention.h"
#include "dtrain/tensor/half.h"
#include "dtrain/tensor/memory_stats.h"
#include "dtrain/tensor/ops.h"
#include "dtrain/tensor/shape.h"
#include "dtrain/tensor/storage.h"
#include "dtrain/tensor/stream.h"
#include "dtrain/tensor/tensor.h"
#include "dtrain/tensor/upload.h"

#include "dtrain/autograd/attention.h"
#include "dtrain/autograd/autocast.h"
#include "dtrain/autograd/checkpoint.h"
#include "dtrain/autograd/functions.h"
#include "dtrain/autograd/fusion.h"
#include "dtrain/autograd/grad_check.h"
#include "dtrain/autograd/linear_cross_entropy.h"
#include "dtrain/autograd/split_backward.h"
#include "dtrain/autograd/variable.h"

#include "dtrain/layers/activation.h"
#include "dtrain/layers/conv.h"
#include "dtrain/layers/embedding.h"
#include "dtrain/layers/gpt.h"
#include "dtrain/layers/init.h"
#include "dtrain/layers/layers.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/models.h"
#include "dtrain/layers/module.h"
#include "dtrain/layers/normalization.h"
#include "dtrain/layers/pooling.h"
#include "dtrain/layers/sequential.h"

#include "dtrain/optim/adam.h"
#include "dtrain/optim/clip_grad.h"
#include "dtrain/optim/lamb.h"
#include "dtrain/optim/lars.h"
#include "dtrain/optim/loss_scaler.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/optim/sgd.h"

#include "dtrain/data/dataloader.h"
#include "dtrain/data/dataset.h"
#include "dtrain/data/distributed_sampler.h"
#include "dtrain/data/image.h"
#include "dtrain/data/image_dataset.h"
#include "dtrain/data/image_folder_index.h"
#include "dtrain/data/image_transforms.h"
#include "dtrain/data/jpeg.h"
#include "dtrain/data/mnist.h"
#include "dtrain/data/sampler.h"
#include "dtrain/data/sharded_images.h"
#include "dtrain/data/subset.h"
#include "dtrain/data/tar_shards.h"
#include "dtrain/data/tensor_dataset.h"
#include "dtrain/data/token_file.h"
#include "dtrain/data/token_windows.h"

#include "dtrain/text/bpe.h"
#include "dtrain/text/corpus.h"
#include "dtrain/text/pretokenize.h"
#include "dtrain/text/tiktoken.h"
#include "dtrain/text/tokenizer.h"

#include "dtrain/dist/strategy/cluster_spec.h"
#include "dtrain/comm/collective_table.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/dist/data_parallel/data_parallel.h"
#include "dtrain/dist/data_parallel/data_parallel_strategy.h"
#include "dtrain/dist/strategy/device_mesh.h"
#include "dtrain/dist/strategy/parallel_dims.h"
#include "dtrain/dist/data_parallel/gradient_exchange.h"
#include "dtrain/comm/nccl.h"
#include "dtrain/comm/partition.h"
#include "dtrain/comm/peer_recovery.h"
#include "dtrain/dist/ps/parameter_server.h"
#include "dtrain/dist/pipeline/pipeline_partition.h"
#include "dtrain/dist/pipeline/pipeline_schedule.h"
#include "dtrain/dist/pipeline/pipeline_strategy.h"
#include "dtrain/dist/ps/ps_strategy.h"
#include "dtrain/dist/tensor_parallel/comm_debug.h"
#include "dtrain/dist/tensor_parallel/gpt_plan.h"
#include "dtrain/dist/tensor_parallel/parallelize.h"
#include "dtrain/dist/tensor_parallel/tensor_parallel_ops.h"
#include "dtrain/dist/zero/zero_strategy.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/dist/strategy/strategy_factory.h"
#include "dtrain/dist/data_parallel/sync_batch_norm.h"

#include "dtrain/checkpoint/atomic_file.h"
#include "dtrain/checkpoint/manifest.h"
#include "dtrain/checkpoint/safetensors.h"
#include "dtrain/checkpoint/store.h"

#include "dtrain/train/checkpointer.h"
#include "dtrain/train/guard.h"
#include "dtrain/train/huggingface.h"
#include "dtrain/train/metrics_log.h"
#include "dtrain/train/observer.h"
#include "dtrain/train/progress.h"
#include "dtrain/train/tensorboard.h"
#include "dtrain/train/trainer.h"
