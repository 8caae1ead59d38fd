#pragma once
#include "dtrain/core/error.h"
