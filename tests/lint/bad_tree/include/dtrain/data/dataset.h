#pragma once
// PRIVATE_DEPS do not count for public headers.
#include "dtrain/autograd/variable.h"
