// train_imagenet: trains a ResNet on ImageNet-format data, either class folders
// (DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg, as torchvision's ImageFolder reads
// them) or WebDataset-style tar shards (DIR/train/*.tar and DIR/val/*.tar, made by
// dtrain-make-shards). JPEGs are decoded and augmented on loader threads (RandomResizedCrop
// and flip for training, Resize + CenterCrop for evaluation), top-1 and top-5 accuracy are
// evaluated sharded over the ranks. Launched by mpirun it trains data-parallel (NCCL on
// GPUs), or as any strategy --parallel names (a pipeline: pp=2,micro=4; parameter servers:
// ps=1,mode=async), with the large-batch recipe: the learning rate scaled linearly with the global
// batch, warm-up then cosine decay, no weight decay on biases and batch-norm parameters,
// label smoothing, and LARS or LAMB for very large batches.
//
//   # Fashion-MNIST as a JPEG tree, then ResNet-20 on 2 ranks:
//   build/examples/dtrain-mnist-to-images /usr/share/datasets/fashion-mnist /tmp/fmnist-jpeg
//   mpirun -np 2 build/examples/train_imagenet --data /tmp/fmnist-jpeg --model resnet20 --image-size 32
//   # ImageNet on 8 GPUs, 256 images per GPU:
//   mpirun -np 8 build/examples/train_imagenet --shards /data/imagenet-shards --model resnet50
//       --device cuda --precision bf16 --batch-size 2048 --epochs 90 --loader-threads 8
//   # throughput without data:
//   build/examples/train_imagenet --synthetic --model resnet50 --batch-size 32 --limit-train 320 --epochs 1
//
// Errors (bad flags, missing or corrupt data under --bad-images fail) print one line naming
// the file and exit non-zero; under mpirun a failing rank ends the whole job.
#include "common/example_support.h"
#include "common/parallel_flags.h"
#include "dtrain/core/log.h"
#include "dtrain/core/parallel.h"
#include "dtrain/data/image_dataset.h"
#include "dtrain/data/sharded_images.h"
#include "dtrain/data/subset.h"
#include "dtrain/data/tensor_dataset.h"
#include "dtrain/comm/nccl.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/layers/models.h"
#include "dtrain/tensor/ops.h"
#include "dtrain/train/trainer.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <optional>

namespace {

using namespace dtrain;
namespace fs = std::filesystem;

// The default learning rates below are for this global batch, scaled linearly from it.
constexpr std::int64_t kBaseBatch = 256;

struct Config {
  std::string data;    // class folders
  std::string shards;  // tar shards
  bool synthetic = false;
  std::int64_t classes = 1000;  // --synthetic only
  std::string model = "resnet50";
  int image_size = 0;  // 0: 224, or 32 for resnet20
  examples::RunFlags run{.epochs = 90, .batch_size = 256, .timeout_s = 600};
  examples::OptimizerFlags opt{.warmup_epochs = 5};  // weight decay unset: 5e-4 for resnet20, 1e-4 otherwise
  double label_smoothing = 0.1;
  double min_crop_scale = 0.08;
  double eval_crop_fraction = 0.875;
  std::vector<float> mean = {0.485f, 0.456f, 0.406f};
  std::vector<float> std = {0.229f, 0.224f, 0.225f};
  std::string bad_images = "fail";
  std::int64_t shuffle_buffer = 2000;
  int loader_threads = 2;
  std::int64_t limit_train = 0;
  std::int64_t limit_test = 0;
  examples::ParallelFlags parallel;
};

void add_flags(CLI::App& app, Config& c) {
  auto* data = app.add_option("--data", c.data, "ImageFolder root: DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg");
  auto* shards =
      app.add_option("--shards", c.shards, "tar shards: DIR/train/*.tar and DIR/val/*.tar (dtrain-make-shards)");
  auto* synthetic =
      app.add_flag("--synthetic", c.synthetic, "random inputs of the model's size: throughput without data");
  data->excludes(shards)->excludes(synthetic);
  shards->excludes(synthetic);
  app.add_option("--classes", c.classes, "--synthetic: the number of classes")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  app.add_option("--model", c.model, "resnet18, resnet50 (ImageNet stem) or resnet20 (CIFAR-style, small images)")
      ->check(CLI::IsMember({"resnet18", "resnet50", "resnet20"}))
      ->capture_default_str();
  app.add_option("--image-size", c.image_size, "training and evaluation crop size (default 224; 32 for resnet20)")
      ->check(CLI::Range(8, 4096));
  examples::add_run_flags(app, c.run, "initialization, shuffling and augmentation");
  examples::add_optimizer_flags(app, c.opt, {"sgd", "lars", "lamb", "adamw"},
                                fmt::format("default: per {} samples sgd 0.1, lars 1.0, lamb 0.004, adamw 0.001, "
                                            "scaled linearly",
                                            kBaseBatch),
                                "default: 5e-4 for resnet20, else 1e-4; never on biases and batch-norm parameters",
                                false);
  app.add_option("--label-smoothing", c.label_smoothing, "label smoothing of the training loss")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--min-crop-scale", c.min_crop_scale, "RandomResizedCrop's smallest area fraction")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  app.add_option("--eval-crop-fraction", c.eval_crop_fraction,
                 "evaluation: resize to image-size / this, then center crop image-size (1: no border cut away)")
      ->check(CLI::Range(0.1, 1.0))
      ->capture_default_str();
  app.add_option("--mean", c.mean, "per-channel mean for normalization (R,G,B)")
      ->delimiter(',')
      ->expected(3)
      ->capture_default_str();
  app.add_option("--std", c.std, "per-channel standard deviation for normalization (R,G,B)")
      ->delimiter(',')
      ->expected(3)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--bad-images", c.bad_images,
                 "a corrupt, truncated or unreadable image: fail (an error naming it) or skip (counted per epoch)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  app.add_option("--shuffle-buffer", c.shuffle_buffer, "--shards: samples in each rank's shuffle buffer")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  app.add_option("--loader-threads", c.loader_threads, "threads per rank that read, decode and augment images")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--limit-train", c.limit_train,
                 "train on N images only: evenly spaced over the class folders, the first N of the (shuffled) shards, "
                 "or N random inputs with --synthetic")
      ->check(CLI::PositiveNumber);
  app.add_option("--limit-test", c.limit_test, "evaluate on N validation images only (chosen as for --limit-train)")
      ->check(CLI::PositiveNumber);
  examples::add_parallel_flags(app, c.parallel);
}

double default_lr(const std::string& optimizer) {
  if (optimizer == "lars") return 1.0;
  if (optimizer == "lamb") return 4e-3;
  if (optimizer == "adamw") return 1e-3;
  return 0.1;
}

struct Splits {
  std::shared_ptr<const data::Dataset> train, test;
  std::int64_t classes = 0;
  std::string source;
};

fs::path split_dir(const std::string& root, const char* flag, const char* split) {
  DTRAIN_CHECK(fs::is_directory(root), "{} '{}': not a directory", flag, root);
  const fs::path dir = fs::path(root) / split;
  DTRAIN_CHECK(fs::is_directory(dir), "{} '{}': no '{}' folder in it (expected {}/train and {}/val)", flag, root, split,
               root, root);
  return dir;
}

// Random inputs and labels, generated once: a pool of batch-sized tensors that the
// training set cycles through, so the loader costs next to nothing.
Splits synthetic_splits(const Config& c, int size) {
  const std::int64_t pool = std::min<std::int64_t>(std::max<std::int64_t>(c.run.batch_size, 64), 512);
  Tensor inputs = Tensor::empty({pool, 3, size, size});
  normal_(inputs);
  Tensor labels = Tensor::from_vector(std::vector<std::int64_t>(static_cast<std::size_t>(pool), 0), {pool});
  for (std::int64_t i = 0; i < pool; ++i) labels.data<std::int64_t>()[i] = i % c.classes;
  auto base = std::make_shared<data::TensorDataset>(inputs, labels);
  const std::int64_t n = c.limit_train > 0 ? c.limit_train : 10 * c.run.batch_size;
  std::vector<std::int64_t> cycle(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) cycle[static_cast<std::size_t>(i)] = i % pool;
  return {std::make_shared<data::Subset>(base, std::move(cycle)), nullptr, c.classes, "synthetic inputs"};
}

std::shared_ptr<const data::Dataset> evenly_spaced(std::shared_ptr<const data::Dataset> d, std::int64_t count) {
  const std::int64_t n = d->size();
  if (count >= n) return d;
  std::vector<std::int64_t> indices(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) indices[static_cast<std::size_t>(i)] = i * n / count;
  return std::make_shared<data::Subset>(std::move(d), std::move(indices));
}

Splits open_splits(const Config& c, int size) {
  if (c.synthetic) return synthetic_splits(c, size);
  data::ImageDatasetOptions images{
      .transform = {}, .seed = c.run.seed, .bad_images = data::parse_bad_image_policy(c.bad_images)};
  images.transform.size = size;
  images.transform.scale_min = c.min_crop_scale;
  images.transform.crop_fraction = c.eval_crop_fraction;
  for (int k = 0; k < 3; ++k) {
    images.transform.mean[k] = c.mean[static_cast<std::size_t>(k)];
    images.transform.std[k] = c.std[static_cast<std::size_t>(k)];
  }
  data::ImageDatasetOptions eval = images;
  eval.transform.train = false;
  Splits s;
  if (!c.shards.empty()) {
    auto train =
        data::ShardedImages::open(split_dir(c.shards, "--shards", "train"),
                                  {.images = images, .shuffle_buffer = c.shuffle_buffer, .max_samples = c.limit_train});
    auto test = data::ShardedImages::open(split_dir(c.shards, "--shards", "val"),
                                          {.images = eval, .max_samples = c.limit_test}, train->classes());
    s = {train, test, static_cast<std::int64_t>(train->classes().size()), c.shards + " (tar shards)"};
  } else {
    DTRAIN_CHECK(!c.data.empty(), "no data: give --data DIR (class folders), --shards DIR or --synthetic");
    auto train = data::ImageFolder::open(split_dir(c.data, "--data", "train"), images);
    auto test = data::ImageFolder::open(split_dir(c.data, "--data", "val"), eval, train->classes());
    s = {train, test, static_cast<std::int64_t>(train->classes().size()), c.data + " (class folders)"};
    // Class folders are listed class by class: a limit takes evenly spaced images, so that
    // every class keeps its share.
    if (c.limit_train > 0) s.train = evenly_spaced(s.train, c.limit_train);
    if (c.limit_test > 0) s.test = evenly_spaced(s.test, c.limit_test);
  }
  return s;
}

std::shared_ptr<nn::Module> make_model(const std::string& name, std::int64_t classes) {
  if (name == "resnet20") return nn::resnet_cifar(20, classes);
  return nn::resnet(name == "resnet18" ? 18 : 50, classes);
}

int run(const Config& c, const dist::CommunicatorPtr& comm) {
  const examples::RunFlags& r = c.run;
  logging::init(comm->rank(), comm->size());
  if (r.threads > 0) set_num_threads(r.threads);
  manual_seed(r.seed);  // the same initial model everywhere; DataParallel also broadcasts rank 0's
  const int size = c.image_size > 0 ? c.image_size : c.model == "resnet20" ? 32 : 224;
  const double weight_decay = c.opt.weight_decay.value_or(c.model == "resnet20" ? 5e-4 : 1e-4);
  const double lr = examples::peak_lr(c.opt, r.batch_size,
                                      optim::linear_scaled_lr(default_lr(c.opt.optimizer), r.batch_size, kBaseBatch));
  const Splits splits = open_splits(c, size);

  const Device device = examples::run_device(r);
  // Data parallel under mpirun (NCCL on GPUs) unless --parallel says otherwise.
  auto strategy =
      examples::make_strategy(c.parallel, comm, device,
                              {.example_shape = {3, size, size},
                               .batch_size = r.batch_size,
                               .accumulate = r.accumulate,
                               .timeout = std::chrono::milliseconds(static_cast<std::int64_t>(r.timeout_s * 1000))});
  std::shared_ptr<nn::Module> whole = make_model(c.model, splits.classes);
  const std::int64_t parameters = whole->num_parameters();
  auto model = strategy->prepare(std::move(whole));
  std::string momentum_note;
  const double momentum = examples::resolved_momentum(c.opt, *strategy, momentum_note);
  auto optimizer = examples::make_optimizer(
      {.name = c.opt.optimizer, .lr = lr, .momentum = momentum, .weight_decay = weight_decay, .exclude_1d = true},
      model->parameters());
  train::TrainerOptions options = examples::trainer_options(r);
  options.label_smoothing = c.label_smoothing;
  options.top_k = splits.classes > 5 ? 5 : 0;
  train::Trainer trainer(strategy,
                         {.train = splits.train,
                          .test = splits.test,
                          .batch_size = r.batch_size,
                          .eval_batch_size = 100,
                          .seed = r.seed,
                          .workers = c.loader_threads},
                         options);
  auto schedule =
      examples::make_schedule({.name = "cosine", .lr = lr, .warmup_epochs = c.opt.warmup_epochs, .epochs = r.epochs},
                              trainer.updates_per_epoch());
  if (strategy->reports()) {
    fmt::print(
        "train_imagenet: {} ({} parameters, {} classes) at {}x{}, {} train / {} val images from {}, "
        "{} rank(s) x {} thread(s) + {} loader thread(s), global batch {}, {} lr {:g} ({:g} per {}), "
        "on {}{}\n",
        c.model, parameters, splits.classes, size, size, splits.train->size(), splits.test ? splits.test->size() : 0,
        splits.source, comm->size(), num_threads(), c.loader_threads, r.batch_size, c.opt.optimizer, lr,
        lr * kBaseBatch / static_cast<double>(r.batch_size), kBaseBatch, device.is_cuda() ? "cuda" : "cpu",
        examples::autocast_description(r.precision, device));
    if (const std::string layout = examples::describe_layout(*strategy, comm->size()); !layout.empty()) {
      fmt::print("{}{}\n", layout, momentum_note);
    }
    std::fflush(stdout);
  }
  const train::FitResult result = trainer.fit(*optimizer, schedule.get());
  if (result.stopped_for_relaunch) return train::kRelaunchExitCode;
  if (strategy->reports()) {
    std::int64_t samples = 0;
    double training_s = 0, waited_s = 0;
    for (const auto& e : result.epochs) {
      samples += e.samples;
      training_s += e.seconds;
      waited_s += e.loader_wait_s;
    }
    fmt::print(
        "trained {} epoch(s) in {:.1f} s (training {:.0f} samples/s); the steps waited {:.1f} s for the loader\n",
        result.epochs.size(), result.seconds, training_s > 0 ? static_cast<double>(samples) / training_s : 0, waited_s);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a ResNet on ImageNet-format data (class folders or tar shards); data-parallel under mpirun",
               "train_imagenet"};
  Config config;
  add_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  return dtrain::examples::run_example("train_imagenet", config.run.timeout_s,
                                       [&](const dist::CommunicatorPtr& comm) { return run(config, comm); });
}
