// Whether the CPU backend keeps f32 activations in oneDNN's blocked-channel layout from one
// layer to the next (see StorageLayout in storage.h). On by default; DTRAIN_CPU_BLOCKED=0
// in the environment turns it off at start, set_cpu_blocked_layout() at any time (the
// results agree to float rounding: tests compare both).
#pragma once

namespace dtrain {

bool cpu_blocked_layout();
void set_cpu_blocked_layout(bool enabled);

}  // namespace dtrain
