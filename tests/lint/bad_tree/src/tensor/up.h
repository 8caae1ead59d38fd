#pragma once
#include "dtrain/layers/module.h"
