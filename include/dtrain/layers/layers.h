// Every layer, for convenience.
#pragma once

#include "dtrain/layers/activation.h"
#include "dtrain/layers/conv.h"
#include "dtrain/layers/embedding.h"
#include "dtrain/layers/init.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/models.h"
#include "dtrain/layers/module.h"
#include "dtrain/layers/normalization.h"
#include "dtrain/layers/pooling.h"
#include "dtrain/layers/sequential.h"
