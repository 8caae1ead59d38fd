#include "dtrain/dist/data_parallel/gradient_exchange.h"

#include "dtrain/core/error.h"
#include "dist/data_parallel/cast_exchange.h"
#include "dist/data_parallel/powersgd_exchange.h"

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
  std::map<std::string, ConfigurableGradientExchangeFactory, std::less<>> kinds;
};

// A factory without options, refusing any.
ConfigurableGradientExchangeFactory without_options(std::string name, GradientExchangeFactory factory) {
  return [name = std::move(name), factory = std::move(factory)](const CommunicatorPtr& replicas,
                                                                std::string_view options) {
    DTRAIN_CHECK(options.empty(), "gradient exchange '{}:{}': {} takes no options", name, options, name);
    return factory(replicas);
  };
}

// The built-in kinds: one line each.
Registry& registry() {
  static Registry r{
      .mutex = {},
      .kinds = {
          {"all_reduce",
           without_options("all_reduce", [](const CommunicatorPtr& c) { return std::make_unique<AllReduceMean>(c); })},
          {"fp16", without_options("fp16", [](const CommunicatorPtr& c) { return make_cast_exchange(c, DType::f16); })},
          {"bf16",
           without_options("bf16", [](const CommunicatorPtr& c) { return make_cast_exchange(c, DType::bf16); })},
          {"powersgd",
           [](const CommunicatorPtr& c, std::string_view options) {
             return make_powersgd_exchange(c, parse_powersgd_options(options));
           }},
      }};
  return r;
}

void add_kind(const std::string& name, ConfigurableGradientExchangeFactory factory) {
  DTRAIN_CHECK(!name.empty() && name.find(':') == std::string::npos,
               "register_gradient_exchange: the name must be non-empty and without ':', got '{}'", name);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.kinds[name] = std::move(factory);
}

}  // namespace

void register_gradient_exchange(const std::string& name, GradientExchangeFactory factory) {
  DTRAIN_CHECK(factory != nullptr, "register_gradient_exchange: '{}' needs a factory", name);
  add_kind(name, without_options(name, std::move(factory)));
}

void register_gradient_exchange(const std::string& name, ConfigurableGradientExchangeFactory factory) {
  DTRAIN_CHECK(factory != nullptr, "register_gradient_exchange: '{}' needs a factory", name);
  add_kind(name, std::move(factory));
}

GradientExchangePtr make_gradient_exchange(std::string_view spec, const CommunicatorPtr& replicas) {
  DTRAIN_CHECK(replicas != nullptr, "gradient exchange '{}': no communicator given", spec);
  const std::size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  const std::string_view options = colon == std::string_view::npos ? std::string_view() : spec.substr(colon + 1);
  ConfigurableGradientExchangeFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    const auto it = r.kinds.find(name);
    if (it != r.kinds.end()) factory = it->second;
  }
  DTRAIN_CHECK(factory != nullptr, "gradient exchange '{}': no such kind (known: {})", spec,
               fmt::join(gradient_exchange_names(), ", "));
  GradientExchangePtr exchange = factory(replicas, options);
  DTRAIN_CHECK(exchange != nullptr, "gradient exchange '{}': its factory returned nothing", spec);
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
