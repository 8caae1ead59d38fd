// A GPT-2-family model in Hugging Face's layout: `GPT2LMHeadModel.from_pretrained(dir)` in
// `transformers` loads what export_gpt2 writes (config.json and model.safetensors) and
// computes the same logits. GPT-2's Conv1D layers hold their weights transposed (in, out);
// a model trained without biases gets zero biases, which GPT2LMHeadModel always has.
#pragma once

#include "dtrain/layers/gpt.h"

#include <filesystem>

namespace dtrain::train {

// Writes `dir`/config.json and `dir`/model.safetensors (f32) from the whole model (on any
// device). Throws for a Llama-style model (not GPT-2's layout) or one with a GELU other than
// GPT-2's, naming what is wrong.
void export_gpt2(const nn::Gpt& model, const std::filesystem::path& dir);

}  // namespace dtrain::train
