// The safetensors reader as a checkpoint load meets a file: SafetensorsFile::parse on the
// whole input, then every tensor read back.
#include "fuzz_support.h"

#include "dtrain/checkpoint/safetensors.h"
#include "dtrain/core/error.h"

#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using dtrain::fuzz::expect;
  try {
    const auto file = dtrain::checkpoint::SafetensorsFile::parse("fuzz.safetensors", {data, data + size});
    const std::vector<std::string> names = file.names();
    expect(names.size() == file.entries().size(), "names() lists every entry");
    for (const auto& e : file.entries()) {
      expect(e.begin <= e.end && e.end <= size, "an entry's bytes lie in the file");
      expect(file.contains(e.name), "contains() knows every entry");
      const dtrain::Tensor t = file.tensor(e.name);
      expect(t.shape() == e.shape && t.dtype() == e.dtype, "a tensor has its entry's shape and dtype");
      expect(static_cast<std::uint64_t>(t.nbytes()) == e.end - e.begin, "a tensor holds its entry's bytes");
    }
    dtrain::fuzz::accepted(std::to_string(names.size()) + " tensors, " + std::to_string(file.metadata().size()) +
                           " metadata entries");
  } catch (const dtrain::Error& e) {
    dtrain::fuzz::rejected(e);
  }
  return 0;
}
