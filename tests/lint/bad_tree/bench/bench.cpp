// Allowed: the program's own headers, relative or from its directory.
#include "ops/local.h"
#include "dtrain/layers/module.h"
