// Allowed: core through tensor (transitive).
#include "dtrain/core/error.h"
#include "dtrain/autograd/variable.h"
