// The "fp16" and "bf16" gradient exchanges (gradient_exchange.h): half the bytes of the
// plain all-reduce on the wire, for slow links.
#pragma once

#include "dtrain/dist/data_parallel/gradient_exchange.h"

namespace dtrain::dist {

// Each bucket is divided by the replica count in its own dtype, cast to `wire` (f16 or
// bf16), summed over `replicas` in 16 bits and cast back when the work is waited on. A
// bucket that is 16-bit already is averaged as it is.
GradientExchangePtr make_cast_exchange(const CommunicatorPtr& replicas, DType wire);

}  // namespace dtrain::dist
