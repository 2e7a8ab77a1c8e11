#!/usr/bin/env python3
"""Mean next-token loss of a Hugging Face LlamaForCausalLM (or
GPT2LMHeadModel) directory, in plain PyTorch (no transformers), to check
trellis-eval of a converted checkpoint against.

    hf_llama_loss.py MODEL_DIR TOKENS_FILE SEQ_LEN WINDOWS
        [--device cpu|cuda] [--dtype float64|float32] [--json OUT]

For Llama it computes what tests/tools/hf_llama_reference.py computes in
plain Python, with torch tensors, so it runs on full-size models too: it
reads config.json and the safetensors (model.safetensors, or the shards
that model.safetensors.index.json names; F32, F16, BF16) itself and runs
hf_models.py's forward (transformers' modeling_llama, or modeling_gpt2 for
model_type gpt2). TOKENS_FILE holds whitespace-separated token ids; window
i is the SEQ_LEN + 1 tokens from offset i · (SEQ_LEN + 1), as trellis-eval
takes them (trellis-eval --max_windows=WINDOWS on the same tokens; SEQ_LEN
may differ from the model's context, as trellis-eval --seq_len). Prints
{"loss": ..., "windows": ...}; --json writes it too. Without PyTorch it
writes {"skipped": ...} and exits 0.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import hf_models  # noqa: E402


def loss(torch, forward, tokens):
    """Mean next-token loss of windows `tokens` (B, T + 1)."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    out = forward(inputs)
    return torch.nn.functional.cross_entropy(
        out.reshape(-1, out.shape[-1]), targets.reshape(-1)).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("tokens_file")
    ap.add_argument("seq_len", type=int)
    ap.add_argument("windows", type=int)
    common.add_forward_args(ap)
    args = ap.parse_args()
    torch = common.import_torch(args.json, args.device, need_sdpa=False)
    config = common.read_config(args.model_dir)
    with open(args.tokens_file) as f:
        ids = [int(s) for s in f.read().split()]
    n = args.windows * (args.seq_len + 1)
    if len(ids) < n:
        sys.exit(f"{args.tokens_file} holds fewer than {args.windows} windows")
    dtype = getattr(torch, args.dtype)
    weights = {k: v.to(args.device, dtype)
               for k, v in common.read_model(torch, args.model_dir).items()}
    tokens = torch.tensor(ids[:n], device=args.device).view(
        args.windows, args.seq_len + 1)
    with torch.no_grad():
        forward = hf_models.Forward(torch, config, weights, args.device)
        result = {"loss": loss(torch, forward, tokens),
                  "windows": args.windows}
    print(json.dumps(result))
    common.write_json(args.json, result)


if __name__ == "__main__":
    main()
