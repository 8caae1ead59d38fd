#include "dtrain/core/environment.h"

#include "dtrain/core/error.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <thread>

#include <unistd.h>

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

// The tasks of this node in a Slurm job step (srun), from SLURM_STEP_TASKS_PER_NODE ("2(x3),1":
// per node of the step, a count with an optional repeat) at index SLURM_NODEID; nullopt when
// either is missing or the list does not parse. srun sets SLURM_NTASKS_PER_NODE only when
// --ntasks-per-node is given, and Open MPI ranks started by srun have no OMPI_COMM_WORLD_LOCAL_SIZE.
std::optional<int> slurm_step_tasks_on_this_node() {
  const auto list = get("SLURM_STEP_TASKS_PER_NODE");
  const auto node = get_int("SLURM_NODEID");
  if (!list || !node || *node < 0) return std::nullopt;
  long index = *node;
  const char* p = list->data();
  const char* end = p + list->size();
  while (p < end) {
    long count = 0, repeat = 1;
    auto r = std::from_chars(p, end, count);
    if (r.ec != std::errc()) return std::nullopt;
    p = r.ptr;
    if (end - p >= 2 && p[0] == '(' && p[1] == 'x') {
      r = std::from_chars(p + 2, end, repeat);
      if (r.ec != std::errc() || r.ptr == end || *r.ptr != ')' || repeat < 1) return std::nullopt;
      p = r.ptr + 1;
    }
    if (index < repeat) return static_cast<int>(count);
    index -= repeat;
    if (p < end && *p++ != ',') return std::nullopt;
  }
  return std::nullopt;
}
}  // namespace

int local_world_size() {
  int n = first_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 0);
  if (n <= 0) n = slurm_step_tasks_on_this_node().value_or(0);
  if (n <= 0) n = first_int({"SLURM_NTASKS_PER_NODE"}, 1);
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

std::size_t cpu_cache_limit_bytes() {
  if (auto mb = get_int("DTRAIN_CPU_CACHE_MB")) {
    DTRAIN_CHECK(*mb >= 0, "environment variable DTRAIN_CPU_CACHE_MB={}: expected megabytes >= 0", *mb);
    return static_cast<std::size_t>(*mb) << 20;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const std::size_t physical = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                                                     : std::size_t{4} << 30;
  return std::min(physical / 4 / static_cast<std::size_t>(local_world_size()), std::size_t{8} << 30);
}

std::optional<long> spin_us_override() {
  auto us = get_int("DTRAIN_SPIN_US");
  DTRAIN_CHECK(!us || (*us >= 0 && *us <= 1'000'000),
               "environment variable DTRAIN_SPIN_US={}: expected microseconds from 0 to 1000000", us.value_or(0));
  return us;
}

}  // namespace dtrain::env
