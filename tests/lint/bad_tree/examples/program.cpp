#include "dtrain/dtrain.h"
#include "dtrain/tensor/tensor.h"
#include "tensor/backend.h"
