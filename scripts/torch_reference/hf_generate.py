#!/usr/bin/env python3
"""Greedy decode of a Hugging Face LlamaForCausalLM or GPT2LMHeadModel
directory, in plain PyTorch (no transformers), to check trellis-generate
--temperature=0 of a converted checkpoint against.

    hf_generate.py MODEL_DIR PROMPT_IDS NEW_TOKENS
        [--device cpu|cuda] [--dtype float64|float32] [--json OUT]

PROMPT_IDS is a comma-separated list of token ids. config.json's
model_type picks hf_models.py's forward: "llama" (transformers'
modeling_llama) or "gpt2" (modeling_gpt2: learned positions, LayerNorm,
gelu_new, Conv1D weights stored (in, out), head tied to wte). For every
new token it runs the whole sequence again (no cache) and takes the
argmax of the last position's logits (the first index on a tie). Prints
{"tokens": [...], "min_margin": m}, m being the smallest gap between the
largest and the second largest logit over the steps (a comparison with
another implementation is only meaningful when it is well above their
rounding differences); --json writes it too. Without PyTorch it writes
{"skipped": ...} and exits 0.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import hf_models  # noqa: E402


def greedy(torch, forward, prompt, new_tokens):
    """(new token ids, smallest top-1 / top-2 logit gap)."""
    ids = list(prompt)
    margin = math.inf
    for _ in range(new_tokens):
        inputs = torch.tensor([ids], device=forward.device)
        last = forward(inputs)[0, -1]
        top = torch.topk(last, 2).values
        margin = min(margin, (top[0] - top[1]).item())
        ids.append(int(torch.argmax(last).item()))
    return ids[len(prompt):], margin


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("prompt_ids")
    ap.add_argument("new_tokens", type=int)
    common.add_forward_args(ap)
    args = ap.parse_args()
    torch = common.import_torch(args.json, args.device, need_sdpa=False)
    config = common.read_config(args.model_dir)
    prompt = [int(s) for s in args.prompt_ids.split(",") if s]
    if not prompt:
        sys.exit("PROMPT_IDS is empty")
    dtype = getattr(torch, args.dtype)
    weights = {k: v.to(args.device, dtype)
               for k, v in common.read_model(torch, args.model_dir).items()}
    forward = hf_models.Forward(torch, config, weights, args.device)
    with torch.no_grad():
        tokens, margin = greedy(torch, forward, prompt, args.new_tokens)
    result = {"tokens": tokens, "min_margin": margin}
    print(json.dumps(result))
    common.write_json(args.json, result)


if __name__ == "__main__":
    main()
