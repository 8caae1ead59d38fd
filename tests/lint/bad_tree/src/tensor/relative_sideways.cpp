#include "../core/cuda/check.h"
