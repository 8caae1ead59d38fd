// The Trainer asking which strategy runs it (tools/check_strategy_core.py must refuse it).
#include "dtrain/dist/pipeline/pipeline_strategy.h"
bool pipelined(const void* s) { return dynamic_cast<const dtrain::dist::PipelineStrategy*>(s) != nullptr; }
