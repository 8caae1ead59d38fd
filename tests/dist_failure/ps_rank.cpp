// A parameter-server job (2 workers, 1 server; async) in which one rank dies mid-training:
//   ps_rank server   the server (rank 2) exits while the workers push: a worker's push or
//                    pull waits for it, and that worker's watchdog (DTRAIN_TIMEOUT) names
//                    the message and rank 2 and aborts the job;
//   ps_rank worker   worker 1 exits after 5 steps: worker 0 trains on for 3 s (steps of at
//                    least 2 ms; long past the server's 1 s stall report; a time, not a
//                    step count, so that a slow build, ASan's, does not stretch it) and
//                    then waits for server 0's answer to its leave, which comes once worker
//                    1 has left too: never, since nothing drops a worker here (lost_after
//                    0), so its watchdog ends the job;
//   ps_rank survive  the same with lost_after 1 s: the server drops worker 1, worker 0's
//                    leave is answered, and it ends with "survived without worker(s) 1"
//                    after a pull over the group of the workers left (exit 0).
// Run by ctest (dist.ps_dead_server, dist.ps_dead_worker, dist.ps_lost_worker) under an
// mpirun that does not kill the survivors when a rank exits.
#include "dtrain/dist/ps/parameter_server.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/sgd.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

using namespace dtrain;

int main(int argc, char** argv) {
  const bool server_dies = argc > 1 && std::strcmp(argv[1], "server") == 0;
  const bool survive = argc > 1 && std::strcmp(argv[1], "survive") == 0;
  auto world = dist::world();
  manual_seed(1);
  auto model = nn::mlp(16, {32}, 4);
  optim::SGD sgd(model->parameters(), {.lr = 0.01});
  dist::ParameterServer ps(world, model,
                           {.mode = dist::PsMode::Async,
                            .servers = 1,
                            .lost_after = survive ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(0)});
  if (ps.is_server()) {
    if (server_dies) {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        std::_Exit(3);
      }).detach();
    }
    ps.serve(sgd);
    return 0;
  }
  const Tensor x = Tensor::ones({8, 16});
  const Tensor y = Tensor::zeros({8}, {DType::i64});
  ps.join();
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < 2000; ++step) {
    if (!server_dies && ps.worker_index() == 1 && step == 5) std::_Exit(3);
    if (!server_dies && std::chrono::steady_clock::now() - start > std::chrono::seconds(3)) break;
    sgd.zero_grad();
    ps.begin_push(0.01);
    cross_entropy((*model)(Variable(x)), y).backward();
    ps.finish_push();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ps.leave();
  ps.sync_parameters();
  // Over the workers left: worker 0 alone after a loss.
  Tensor one = Tensor::ones({1});
  ps.worker_group()->all_reduce(one);
  ps.shutdown();
  if (survive) {
    std::printf("survived without worker(s) %d; %d worker(s) in the group\n",
                ps.lost_workers().empty() ? -1 : ps.lost_workers().front(), static_cast<int>(one.item()));
  }
  return 0;
}
