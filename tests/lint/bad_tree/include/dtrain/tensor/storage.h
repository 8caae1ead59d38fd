#pragma once
#include "dtrain/core/error.h"
#include "tensor/backend.h"
