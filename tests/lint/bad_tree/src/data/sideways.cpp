#include "dtrain/layers/module.h"
