#include "dtrain/optim/lr_schedule.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <numbers>

namespace dtrain::optim {

TEST_CASE("ConstantLr and StepLr follow their closed forms", "[cpu][optim]") {
  ConstantLr constant(0.3);
  CHECK(constant.lr_at(0) == 0.3);
  CHECK(constant.lr_at(123456) == 0.3);

  StepLr step(0.1, 30, 0.5);
  CHECK(step.lr_at(0) == Approx(0.1));
  CHECK(step.lr_at(29) == Approx(0.1));
  CHECK(step.lr_at(30) == Approx(0.05));
  CHECK(step.lr_at(59) == Approx(0.05));
  CHECK(step.lr_at(90) == Approx(0.0125));
}

TEST_CASE("CosineLr anneals from base to min_lr, then stays there", "[cpu][optim]") {
  CosineLr cosine(1.0, 100, 0.1);
  for (std::int64_t s : {0, 1, 25, 50, 73, 99, 100}) {
    const double expected = 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * static_cast<double>(s) / 100.0));
    CHECK(cosine.lr_at(s) == Approx(expected).epsilon(1e-12));
  }
  CHECK(cosine.lr_at(0) == Approx(1.0));
  CHECK(cosine.lr_at(50) == Approx(0.55));
  CHECK(cosine.lr_at(100) == Approx(0.1));
  CHECK(cosine.lr_at(1000) == 0.1);
  CHECK(CosineLr(0.5, 10).lr_at(10) == 0.0);
}

TEST_CASE("WarmupLr ramps linearly into the schedule after it", "[cpu][optim]") {
  auto after = std::make_shared<StepLr>(0.4, 10, 0.1);
  WarmupLr warmup(after, 5, 0.25);
  CHECK(warmup.lr_at(0) == Approx(0.1));  // 0.25 * 0.4
  CHECK(warmup.lr_at(1) == Approx(0.1 + 0.3 * 1 / 5));
  CHECK(warmup.lr_at(4) == Approx(0.1 + 0.3 * 4 / 5));
  CHECK(warmup.lr_at(5) == Approx(0.4));    // after.lr_at(0)
  CHECK(warmup.lr_at(14) == Approx(0.4));   // after.lr_at(9)
  CHECK(warmup.lr_at(15) == Approx(0.04));  // after.lr_at(10)

  WarmupLr from_zero(std::make_shared<ConstantLr>(2.0), 4);
  CHECK(from_zero.lr_at(0) == 0.0);
  CHECK(from_zero.lr_at(2) == Approx(1.0));
  CHECK(from_zero.lr_at(4) == 2.0);

  WarmupLr none(std::make_shared<ConstantLr>(2.0), 0);
  CHECK(none.lr_at(0) == 2.0);
}

TEST_CASE("linear_scaled_lr applies the linear scaling rule", "[cpu][optim]") {
  CHECK(linear_scaled_lr(0.1, 8192, 256) == Approx(3.2));
  CHECK(linear_scaled_lr(0.1, 256, 256) == Approx(0.1));
  CHECK(linear_scaled_lr(0.1, 64, 256) == Approx(0.025));
}

TEST_CASE("LR schedules reject invalid arguments, naming them", "[cpu][optim]") {
  CHECK_THROWS_WITH(ConstantLr(-1.0), Catch::Contains("base") && Catch::Contains("-1"));
  CHECK_THROWS_WITH(StepLr(0.1, 0, 0.5), Catch::Contains("step_size") && Catch::Contains("0"));
  CHECK_THROWS_WITH(StepLr(0.1, 10, 0.0), Catch::Contains("gamma"));
  CHECK_THROWS_WITH(CosineLr(0.1, 0), Catch::Contains("total_steps"));
  CHECK_THROWS_WITH(CosineLr(0.1, 10, 0.2), Catch::Contains("min_lr") && Catch::Contains("0.2"));
  CHECK_THROWS_WITH(WarmupLr(nullptr, 5), Catch::Contains("null"));
  CHECK_THROWS_WITH(WarmupLr(std::make_shared<ConstantLr>(1.0), -1), Catch::Contains("warmup_steps"));
  CHECK_THROWS_WITH(WarmupLr(std::make_shared<ConstantLr>(1.0), 5, 1.5), Catch::Contains("start_factor"));
  CHECK_THROWS_WITH(linear_scaled_lr(0.1, 0, 256), Catch::Contains("global_batch"));
  CHECK_THROWS_WITH(linear_scaled_lr(0.1, 256, -1), Catch::Contains("base_batch"));
  CHECK_THROWS_WITH(StepLr(0.1, 10, 0.5).lr_at(-1), Catch::Contains("step") && Catch::Contains("-1"));
}

}  // namespace dtrain::optim
