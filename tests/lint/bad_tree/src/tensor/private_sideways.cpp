#include "dtrain/core/error.h"
#include "core/cuda/check.h"
