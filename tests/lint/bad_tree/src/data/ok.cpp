// Allowed: a PRIVATE_DEPS layer's public header, in src/.
#include "dtrain/autograd/variable.h"
