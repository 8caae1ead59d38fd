#include "ops/local.h"
#include "local.h"
