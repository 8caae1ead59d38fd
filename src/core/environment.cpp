#include "dtrain/core/environment.h"

#include "dtrain/core/error.h"

#include <charconv>
#include <cstdlib>
#include <thread>

namespace dtrain::env {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<long> get_int(const char* name) {
  auto text = get(name);
  if (!text) return std::nullopt;
  long value = 0;
  const char* end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, value);
  DTRAIN_CHECK(ec == std::errc() && ptr == end, "environment variable {}='{}': expected an integer", name,
               *text);
  return value;
}

namespace {
int first_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names) {
    if (auto v = get_int(name)) return static_cast<int>(*v);
  }
  return fallback;
}
}  // namespace

int local_world_size() {
  int n = first_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}, 1);
  return n > 0 ? n : 1;
}

int local_rank() {
  int r = first_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0);
  return r >= 0 ? r : 0;
}

int hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace dtrain::env
