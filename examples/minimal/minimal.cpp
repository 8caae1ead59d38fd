// The smallest complete dtrain program, and the README's library example verbatim: data,
// a model, a strategy, the Trainer, all under run_program (an error on one rank ends the
// job instead of leaving the others waiting).
//
//   mpirun -np 2 minimal                        # Fashion-MNIST from Debian, data parallel
//   mpirun -np 2 minimal DIR pp=2,micro=4       # any MNIST-format directory, a pipeline
//   mpirun -np 3 minimal DIR ps=1,mode=async    # two workers and a parameter server
#include "dtrain/dtrain.h"

#include <string>

using namespace dtrain;

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  const std::string spec = argc > 2 ? argv[2] : "dp";  // dist/strategy_factory.h
  return dist::run_program("minimal", [&](const dist::CommunicatorPtr& world) {
    using Split = data::MnistDataset::Split;
    auto train_set = data::Subset::first(data::MnistDataset::load(dir, Split::Train), 6000);
    auto test_set = data::Subset::first(data::MnistDataset::load(dir, Split::Test), 1000);

    auto strategy = dist::make_strategy(spec, world, Device::cpu());
    manual_seed(1);                                   // the same initial model on every rank
    auto model = strategy->prepare(nn::lenet_cnn());  // placed, wrapped or cut for this rank
    optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9});

    train::Trainer trainer(strategy, {.train = train_set, .test = test_set, .batch_size = 64}, {.epochs = 1});
    optim::CosineLr schedule(0.05, trainer.updates_per_epoch());
    trainer.fit(sgd, &schedule);  // progress and "final test accuracy" on the reporting rank
    return 0;
  });
}
