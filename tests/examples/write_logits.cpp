// Loads the latest checkpoint's model.safetensors into train_mnist's MLP, as dtrain itself
// would resume it, runs it on the first COUNT test images of DATA (normalised by the
// trainer's defaults) and writes the logits, f32 (COUNT, 10) named "logits", to OUT as
// safetensors: check_safetensors.py compares them with its PyTorch twin's on the same images.
//   write_logits CHECKPOINT_ROOT HIDDEN DATA COUNT OUT   (e.g. ckpt 64,64 /usr/share/datasets/fashion-mnist 64 out)
#include "dtrain/autograd/variable.h"
#include "dtrain/checkpoint/atomic_file.h"
#include "dtrain/checkpoint/safetensors.h"
#include "dtrain/checkpoint/store.h"
#include "dtrain/core/error.h"
#include "dtrain/data/mnist.h"
#include "dtrain/layers/models.h"
#include "dtrain/layers/module.h"

#include <cstdint>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<std::int64_t> widths_of(const std::string& list) {
  std::vector<std::int64_t> widths;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) widths.push_back(std::stoll(item));
  return widths;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtrain;
  try {
    DTRAIN_CHECK(argc == 6, "usage: write_logits CHECKPOINT_ROOT HIDDEN DATA COUNT OUT");
    const auto latest = checkpoint::CheckpointStore(argv[1]).latest();
    DTRAIN_CHECK(latest.has_value(), "{}: no checkpoint", argv[1]);
    const auto file = checkpoint::SafetensorsFile::read(*latest / "model.safetensors");
    nn::StateDict state;
    for (const std::string& name : file.names()) state.emplace_back(name, file.tensor(name));
    auto model = nn::mlp(28 * 28, widths_of(argv[2]), 10);
    model->load_state_dict(state, /*strict=*/true);
    model->eval();

    const auto test = data::MnistDataset::load(argv[3], data::MnistDataset::Split::Test);
    std::vector<std::int64_t> first(std::stoll(argv[4]));
    std::iota(first.begin(), first.end(), 0);
    const NoGradGuard no_grad;
    const Tensor logits = (*model)(Variable(test->get_batch(first).inputs)).data();

    checkpoint::AtomicFile out(argv[5]);
    checkpoint::write_safetensors(out, {{"logits", logits}});
    out.commit();
    std::printf("write_logits: %s: logits of %zu images from %s\n", argv[5], first.size(), latest->c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_logits: error: %s\n", e.what());
    return 1;
  }
}
