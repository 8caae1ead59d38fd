#include "dtrain/dtrain.h"
