#include "dtrain/dist/data_parallel/gradient_exchange.h"

#include "dtrain/core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <mutex>

namespace dtrain::dist {
namespace {

// The default: every bucket averaged over the replicas in place.
class AllReduceMean final : public GradientExchange {
 public:
  explicit AllReduceMean(CommunicatorPtr replicas) : replicas_(std::move(replicas)) {}
  std::string name() const override { return "all_reduce"; }
  WorkPtr start(std::size_t, Tensor& buffer) override { return replicas_->all_reduce_async(buffer, ReduceOp::Mean); }

 private:
  CommunicatorPtr replicas_;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, GradientExchangeFactory, std::less<>> kinds;
};

// The built-in kinds: one line each.
Registry& registry() {
  static Registry r{.mutex = {},
                    .kinds = {
                        {"all_reduce", [](const CommunicatorPtr& c) { return std::make_unique<AllReduceMean>(c); }},
                    }};
  return r;
}

}  // namespace

void register_gradient_exchange(const std::string& name, GradientExchangeFactory factory) {
  DTRAIN_CHECK(!name.empty() && factory != nullptr, "register_gradient_exchange: a name and a factory are needed");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.kinds[name] = std::move(factory);
}

GradientExchangePtr make_gradient_exchange(std::string_view name, const CommunicatorPtr& replicas) {
  DTRAIN_CHECK(replicas != nullptr, "gradient exchange '{}': no communicator given", name);
  GradientExchangeFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    const auto it = r.kinds.find(name);
    if (it != r.kinds.end()) factory = it->second;
  }
  DTRAIN_CHECK(factory != nullptr, "gradient exchange '{}': no such kind (known: {})", name,
               fmt::join(gradient_exchange_names(), ", "));
  GradientExchangePtr exchange = factory(replicas);
  DTRAIN_CHECK(exchange != nullptr, "gradient exchange '{}': its factory returned nothing", name);
  return exchange;
}

std::vector<std::string> gradient_exchange_names() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.kinds) names.push_back(name);
  return names;
}

}  // namespace dtrain::dist
