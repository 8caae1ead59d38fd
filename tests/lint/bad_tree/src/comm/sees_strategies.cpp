#include "dtrain/dist/strategy/strategy.h"
#include "dist/strategy/replica_state.h"
#include "dtrain/tensor/tensor.h"
