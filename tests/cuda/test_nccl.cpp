// The NCCL communicator on one rank (the GPU machine has one GPU, and NCCL allows one rank
// per GPU): every collective's plumbing (streams, events, dtypes, argument checks), and a
// DataParallel step and sharded data parallelism's steps (stages 1-3) on a CUDA model,
// against the same step without them. Several ranks need
// several GPUs and MPI: tests/dist runs those when the machine has them. Without a device,
// only the error paths run.
#include "cuda_test.h"
#include "support/test_support.h"

#include "dtrain/autograd/functions.h"
#include "dtrain/dist/data_parallel/data_parallel.h"
#include "dtrain/comm/nccl.h"
#include "dtrain/dist/zero/zero_strategy.h"
#include "dtrain/layers/layers.h"
#include "dtrain/optim/adam.h"
#include "dtrain/optim/sgd.h"

namespace dtrain::test {
namespace {

using Catch::Matchers::Contains;

dist::CommunicatorPtr nccl_world() { return dist::nccl_communicator(dist::world(), kGpu); }

Tensor on_gpu(const Shape& shape, std::uint64_t seed, DType dtype = DType::f32) {
  return random_tensor(shape, seed, DType::f64, -4, 4).to(dtype).to(kGpu);
}

}  // namespace

TEST_CASE("nccl: without a device or without CUDA, asking for it is a clear error", "[cuda][nccl]") {
  if (cuda::available()) {  // the GPU machine runs the cases below instead
    skip_test_case("a CUDA device is present: this case checks the error without one");
    return;
  }
  REQUIRE_THROWS_WITH(dist::nccl_communicator(dist::world(), kGpu), Contains("nccl_communicator"));
  REQUIRE_THROWS_WITH(dist::rank_cuda_device(), Contains("rank_cuda_device"));
}

TEST_CASE("nccl: a CPU device is refused", "[cuda][nccl]") {
  REQUIRE_THROWS_WITH(dist::nccl_communicator(dist::world(), Device::cpu()),
                      Contains(dist::nccl_built() ? "expected a CUDA device" : "no NCCL"));
}

TEST_CASE("nccl: one rank's collectives leave their data as a group of one should", "[cuda][nccl]") {
  if (!cuda_ready()) return;
  REQUIRE(dist::rank_cuda_device() == kGpu);
  auto nccl = nccl_world();
  REQUIRE(nccl->backend() == "nccl");
  REQUIRE(nccl->rank() == 0);
  REQUIRE(nccl->size() == 1);

  // f16 and bf16 too: DataParallel of a 16-bit model all-reduces 16-bit gradients.
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64, DType::f16, DType::bf16}) {
    INFO("dtype " << dtype_name(dt));
    const Tensor original = on_gpu({1000, 3}, 7, dt);
    for (auto op : {dist::ReduceOp::Sum, dist::ReduceOp::Max, dist::ReduceOp::Min}) {
      Tensor t = original.clone();
      nccl->all_reduce(t, op);
      require_close(t.to(Device::cpu()), original.to(Device::cpu()), 0, 0);
    }
  }
  // Asynchronous, then a kernel queued after wait() reads the result.
  Tensor x = on_gpu({4096}, 8);
  Tensor copy = x.clone();
  auto work = nccl->all_reduce_async(x, dist::ReduceOp::Mean);
  work->wait();
  require_close(mul(x, 2.0).to(Device::cpu()), mul(copy, 2.0).to(Device::cpu()), 0, 0);

  Tensor b = on_gpu({5, 5}, 9);
  const Tensor b0 = b.to(Device::cpu());
  nccl->broadcast(b, 0);
  require_close(b.to(Device::cpu()), b0, 0, 0);

  const Tensor in = on_gpu({3, 4}, 10);
  Tensor gathered = Tensor::zeros({1, 3, 4}, {DType::f32, kGpu});
  nccl->all_gather(in, gathered);
  require_close(gathered.select(0, 0).to(Device::cpu()), in.to(Device::cpu()), 0, 0);

  Tensor scattered = Tensor::zeros({3, 4}, {DType::f32, kGpu});
  nccl->reduce_scatter(gathered, scattered);
  require_close(scattered.to(Device::cpu()), in.to(Device::cpu()), 0, 0);

  // The asynchronous forms, queued back to back on the collectives' lane (what a sharded
  // optimizer does: a bucket's reduce-scatter, then the next parameters' all-gather).
  Tensor gathered_async = Tensor::zeros({1, 3, 4}, {DType::f32, kGpu});
  Tensor scattered_async = Tensor::zeros({3, 4}, {DType::f32, kGpu});
  auto gather_work = nccl->all_gather_async(in, gathered_async);
  auto scatter_work = nccl->reduce_scatter_async(gathered_async, scattered_async, dist::ReduceOp::Mean);
  scatter_work->wait();
  gather_work->wait();
  require_close(scattered_async.to(Device::cpu()), in.to(Device::cpu()), 0, 0);

  nccl->barrier();
  auto child = nccl->split(0, 0);
  REQUIRE(child->size() == 1);
  REQUIRE(child->backend() == "nccl");
  Tensor c = on_gpu({17}, 11);
  const Tensor c0 = c.to(Device::cpu());
  child->all_reduce(c);
  require_close(c.to(Device::cpu()), c0, 0, 0);
}

TEST_CASE("nccl: wrong tensors are refused with the operation's name", "[cuda][nccl]") {
  if (!cuda_ready()) return;
  auto nccl = nccl_world();
  Tensor cpu = Tensor::zeros({4});
  REQUIRE_THROWS_WITH(nccl->all_reduce(cpu), Contains("all_reduce") && Contains("on cpu"));
  Tensor strided = Tensor::zeros({4, 4}, {DType::f32, kGpu}).t();
  REQUIRE_THROWS_WITH(nccl->broadcast(strided, 0), Contains("broadcast") && Contains("contiguous"));
  Tensor bytes = Tensor::zeros({4}, {DType::u8, kGpu});
  REQUIRE_THROWS_WITH(nccl->all_reduce(bytes), Contains("cannot be reduced"));
  Tensor t = Tensor::zeros({4}, {DType::f32, kGpu});
  REQUIRE_THROWS_WITH(nccl->send(t, 0), Contains("send: dst 0 is this rank"));
  REQUIRE_THROWS_WITH(nccl->broadcast(t, 1), Contains("out of range"));
}

// Point to point on one rank: only a batch can send to the rank itself (one NCCL group),
// which exercises the messages' own communicator and stream; the rest is argument checks.
TEST_CASE("nccl: a batch of messages to itself arrives, beside an all-reduce on the other lane", "[cuda][nccl]") {
  if (!cuda_ready()) return;
  auto nccl = nccl_world();
  Tensor reduced = on_gpu({1 << 20}, 20);
  const Tensor reduced0 = reduced.to(Device::cpu());
  auto reduction = nccl->all_reduce_async(reduced);  // on the collectives' lane
  const Tensor a = on_gpu({1000}, 21), b = on_gpu({7, 3}, 22, DType::f64);
  Tensor a_in = Tensor::zeros({1000}, {DType::f32, kGpu}), b_in = Tensor::zeros({7, 3}, {DType::f64, kGpu});
  using dist::P2POp;
  std::vector<dist::WorkPtr> works = nccl->batch_isend_irecv(
      {P2POp::recv(a_in, 0, 1), P2POp::send(a, 0, 1), P2POp::send(b, 0, 2), P2POp::recv(b_in, 0, 2)});
  REQUIRE(works.size() == 4);
  for (auto& w : works) w->wait();
  reduction->wait();
  require_close(a_in.to(Device::cpu()), a.to(Device::cpu()), 0, 0);
  require_close(b_in.to(Device::cpu()), b.to(Device::cpu()), 0, 0);
  require_close(reduced.to(Device::cpu()), reduced0, 0, 0);
  nccl->barrier();
}

TEST_CASE("nccl: messages refuse kAnySource, oneself outside a batch and bad tags", "[cuda][nccl]") {
  if (!cuda_ready()) return;
  auto nccl = nccl_world();
  Tensor t = Tensor::zeros({4}, {DType::f32, kGpu});
  REQUIRE_THROWS_WITH(nccl->irecv(t, dist::kAnySource),
                      Contains("irecv: NCCL has no receive from any source (kAnySource)") && Contains("MPI"));
  REQUIRE_THROWS_WITH(nccl->isend(t, 0), Contains("isend: dst 0 is this rank"));
  REQUIRE_THROWS_WITH(nccl->recv(t, 0), Contains("recv: src 0 is this rank"));
  REQUIRE_THROWS_WITH(nccl->irecv(t, 1), Contains("irecv: src 1 is out of range"));
  REQUIRE_THROWS_WITH(nccl->isend(t, 0, dist::kAnyTag), Contains("isend: tag must be >= 0"));
  Tensor cpu = Tensor::zeros({4});
  REQUIRE_THROWS_WITH(nccl->batch_isend_irecv({dist::P2POp::send(cpu, 0)}),
                      Contains("batch_isend_irecv") && Contains("on cpu"));
  REQUIRE(nccl->batch_isend_irecv({}).empty());
}

// DataParallel over NCCL on one rank averages over one replica, so its step must equal
// the plain step exactly (same kernels, same order): this checks the bucket copies, the
// stream ordering of the all-reduce and the gradient views.
TEST_CASE("nccl: a DataParallel step on a CUDA model equals the plain step", "[cuda][nccl]") {
  if (!cuda_ready()) return;
  auto make_model = [] {
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(12, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 5)});
  };
  auto plain = make_model();
  auto wrapped = make_model();
  const auto from = plain->parameters(), into = wrapped->parameters();
  for (std::size_t i = 0; i < from.size(); ++i) {
    Tensor target = into[i].data();
    target.copy_(from[i].data());
  }
  plain->to(kGpu);
  wrapped->to(kGpu);
  dist::DataParallelOptions options;
  options.bucket_bytes = 512;  // several buckets
  dist::DataParallel ddp(wrapped, nccl_world(), options);
  REQUIRE(ddp.tensor_communicator()->backend() == "nccl");

  optim::SGD plain_opt(plain->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD ddp_opt(wrapped->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    const Tensor x = on_gpu({16, 12}, 100 + step);
    const Tensor y = random_tensor({16}, 200 + step, DType::f64, 0, 5).to(DType::i64).to(kGpu);
    plain_opt.zero_grad();
    cross_entropy(plain->forward(Variable(x)), y).backward();
    plain_opt.step();
    ddp_opt.zero_grad();
    cross_entropy(ddp.forward(Variable(x)), y).backward();
    ddp.finish_gradient_sync();
    ddp_opt.step();
  }
  const auto a = plain->parameters(), b = wrapped->parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    require_close(b[i].data().to(Device::cpu()), a[i].data().to(Device::cpu()), 1e-6, 1e-7);
  }
  REQUIRE(ddp.check_replicas() == 0.0);
}

// Sharded data parallelism over NCCL on one rank: one chunk holds every element, so each
// stage's step must equal the plain step: this checks the reduce-scatter, the in-place and
// the layer-by-layer all-gathers (stage 3 frees and regathers each layer), and the
// optimizer's slices on the GPU.
TEST_CASE("nccl: sharded data parallel (stages 1-3) on one rank equals the plain step", "[cuda][nccl]") {
  if (!cuda_ready()) return;
  auto make_model = [] {
    manual_seed(8);
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(12, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 5)});
  };
  const dist::StepConfig config{.loss = [](const Variable& out, const Tensor& y) { return cross_entropy(out, y); },
                                .clip_grad_norm = 0.5};
  const auto train = [&](const std::shared_ptr<dist::Strategy>& strategy) {
    strategy->prepare(make_model());
    optim::Adam adam(strategy->module().parameters(), {.lr = 0.01});
    for (int step = 0; step < 3; ++step) {
      const std::vector<dist::MicroBatch> micro{
          {on_gpu({16, 12}, 100 + step), random_tensor({16}, 200 + step, DType::f64, 0, 5).to(DType::i64).to(kGpu)}};
      strategy->train_step(micro, adam, config);
    }
    const auto copy = [&] {
      std::vector<Tensor> out;
      for (const auto& p : strategy->module().parameters()) out.push_back(p.data().to(Device::cpu()));
      return out;
    };
    auto* sharded = dynamic_cast<dist::ZeroStrategy*>(strategy.get());
    if (sharded == nullptr) return copy();
    const auto whole = sharded->whole_parameters();  // stage 3 gathers them for the copy
    return copy();
  };
  const std::vector<Tensor> plain = train(std::make_shared<dist::LocalStrategy>(kGpu));
  for (int stage : {1, 2, 3}) {
    INFO("stage " << stage);
    const std::vector<Tensor> sharded = train(std::make_shared<dist::ZeroStrategy>(
        nccl_world(), kGpu, dist::ZeroOptions{.stage = stage, .bucket_bytes = 512, .unit_bytes = 0}));
    REQUIRE(sharded.size() == plain.size());
    for (std::size_t i = 0; i < plain.size(); ++i) require_close(sharded[i], plain[i], 1e-6, 1e-7);
  }
}

}  // namespace dtrain::test
