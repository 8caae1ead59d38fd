// Allowed: own private headers, a relative one, the public headers of a lower layer.
#include "backend.h"
#include "tensor/backend.h"
#include "dtrain/config.h"
#include "dtrain/core/error.h"
#include "dtrain/tensor/tensor.h"
#include <vector>
