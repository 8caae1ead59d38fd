// Writes the scalars given as TAG@STEP=VALUE into a TensorBoard event file in DIR (with
// the file suffix "rank0"), for check_tensorboard.py to read back with TensorBoard's reader.
//   write_tensorboard DIR TAG@STEP=VALUE...
#include "dtrain/core/error.h"
#include "dtrain/train/tensorboard.h"

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  try {
    DTRAIN_CHECK(argc >= 2, "usage: write_tensorboard DIR TAG@STEP=VALUE...");
    dtrain::train::TensorBoardWriter writer(argv[1], "rank0");
    for (int i = 2; i < argc; ++i) {
      std::string point = argv[i];
      auto equals = point.rfind('=');
      auto at = point.rfind('@', equals);
      DTRAIN_CHECK(equals != std::string::npos && at != std::string::npos, "'{}': expected TAG@STEP=VALUE", point);
      writer.add_scalar(point.substr(0, at), std::stod(point.substr(equals + 1)),
                        std::stoll(point.substr(at + 1, equals - at - 1)));
    }
    writer.flush();
    std::printf("%s\n", writer.path().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_tensorboard: error: %s\n", e.what());
    return 1;
  }
}
