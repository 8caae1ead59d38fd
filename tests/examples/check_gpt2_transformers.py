"""Loads dtrain's GPT-2 export into Hugging Face transformers and compares logits.

write_gpt_reference writes dtrain's logits on a batch of tokens (FILE) and exports the same
weights with train::export_gpt2 (FILE_hf/: config.json, model.safetensors);
GPT2LMHeadModel.from_pretrained must load them without missing or unexpected weights and
compute logits within 1e-4 of dtrain's in relative norm (f32).

  check_gpt2_transformers.py FILE.safetensors
Exits 77 (skipped) without transformers, unless DTRAIN_REQUIRE_INTEROP=1.
"""
import os
import sys

try:
    import torch
    from safetensors.torch import load_file
    from transformers import GPT2LMHeadModel
except ImportError as e:
    if os.environ.get("DTRAIN_REQUIRE_INTEROP") == "1":
        print(f"check_gpt2_transformers: {e} (DTRAIN_REQUIRE_INTEROP=1)")
        sys.exit(1)
    print(f"check_gpt2_transformers: skipped: {e}")
    sys.exit(77)


def main():
    path = sys.argv[1]
    ref = load_file(path)
    model, info = GPT2LMHeadModel.from_pretrained(path + "_hf", output_loading_info=True)
    problems = [f"{k}: {v}" for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")]
    model.eval()
    with torch.no_grad():
        logits = model(ref["tokens"]).logits
    want = ref["logits"].to(torch.float32)
    rel = (torch.linalg.norm((logits - want).flatten()) / torch.linalg.norm(want.flatten())).item()
    print(f"check_gpt2_transformers: GPT2LMHeadModel ({model.config.n_layer} layers, width {model.config.n_embd}) "
          f"from dtrain's export: logits within {rel:.3g} of dtrain's (bound 1e-4)")
    if not rel <= 1e-4:
        problems.append(f"logits differ by {rel:.3g} > 1e-4")
    for p in problems:
        print("check_gpt2_transformers: FAILED: " + p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
