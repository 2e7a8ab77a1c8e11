#!/usr/bin/env python3
"""Greedy decode of a Hugging Face LlamaForCausalLM or GPT2LMHeadModel
directory, in plain PyTorch (no transformers), to check trellis-generate
--temperature=0 of a converted checkpoint against.

    hf_generate.py MODEL_DIR PROMPT_IDS NEW_TOKENS
        [--device cpu|cuda] [--dtype float64|float32] [--json OUT]

PROMPT_IDS is a comma-separated list of token ids. config.json's
model_type picks the forward: "llama" is hf_llama_loss.py's (transformers'
modeling_llama); "gpt2" follows modeling_gpt2: token plus learned position
embeddings, pre-LN blocks (LayerNorm with layer_norm_epsilon), Conv1D
weights stored (in, out) and applied as x @ W + b, causal softmax attention,
the gelu_new (tanh) MLP, the final LayerNorm and the head tied to wte. For
every new token it runs the whole sequence again (no cache) and takes the
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
import hf_llama_loss  # noqa: E402


def layer_norm(torch, x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def gelu_new(torch, x):
    return 0.5 * x * (1.0 + torch.tanh(
        math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_logits(torch, config, w, inputs):
    """The next-token logits (B, T, V) of token ids `inputs` (B, T)."""
    c, n_head = config["n_embd"], config["n_head"]
    d = c // n_head
    eps = config.get("layer_norm_epsilon", 1e-5)
    b, t = inputs.shape
    if t > config["n_positions"]:
        raise ValueError(f"{t} tokens exceed n_positions "
                         f"{config['n_positions']}")
    mask = torch.tril(torch.ones(t, t, device=inputs.device)).bool()
    x = w["wte.weight"][inputs] + w["wpe.weight"][:t]
    for layer in range(config["n_layer"]):
        p = f"h.{layer}."

        def conv1d(name, h, p=p):  # transformers' Conv1D: (in, out) weight
            return h @ w[p + name + ".weight"] + w[p + name + ".bias"]

        h = layer_norm(torch, x, w[p + "ln_1.weight"], w[p + "ln_1.bias"],
                       eps)
        q, k, v = conv1d("attn.c_attn", h).split(c, dim=-1)
        q, k, v = (y.view(b, t, n_head, d).transpose(1, 2) for y in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(~mask, float("-inf"))
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + conv1d("attn.c_proj", a)
        h = layer_norm(torch, x, w[p + "ln_2.weight"], w[p + "ln_2.bias"],
                       eps)
        x = x + conv1d("mlp.c_proj", gelu_new(torch, conv1d("mlp.c_fc", h)))
    x = layer_norm(torch, x, w["ln_f.weight"], w["ln_f.bias"], eps)
    return x @ w.get("lm_head.weight", w["wte.weight"]).T


def gpt2_weights(tensors):
    """GPT2LMHeadModel's names ("transformer.h.0...") or GPT2Model's
    ("h.0..."), as GPT2Model's; the attention mask buffers left out."""
    out = {}
    for name, t in tensors.items():
        bare = name[len("transformer."):] if name.startswith(
            "transformer.") else name
        if bare.endswith(".attn.bias") or bare.endswith(".attn.masked_bias"):
            continue
        out[bare] = t
    return out


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


class Forward:
    """The model's logits as a function of the ids, on `device`."""

    def __init__(self, torch, config, weights, device):
        self.device = device
        kind = config.get("model_type", "")
        if kind == "llama":
            self.fn = lambda ids: hf_llama_loss.logits(torch, config, weights,
                                                       ids)
        elif kind == "gpt2":
            weights = gpt2_weights(weights)
            self.fn = lambda ids: gpt2_logits(torch, config, weights, ids)
        else:
            raise ValueError(f"model_type {kind!r} is neither llama nor gpt2")

    def __call__(self, ids):
        return self.fn(ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("prompt_ids")
    ap.add_argument("new_tokens", type=int)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float64",
                    choices=["float64", "float32"])
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    try:
        import torch  # noqa: PLC0415 (the import is what may fail)
    except ImportError as e:
        common.skip(args.json, f"no PyTorch in {sys.executable} ({e})")
    if args.device == "cuda" and not torch.cuda.is_available():
        common.skip(args.json, "PyTorch sees no CUDA device")
    config = common.read_config(args.model_dir)
    prompt = [int(s) for s in args.prompt_ids.split(",") if s]
    if not prompt:
        sys.exit("PROMPT_IDS is empty")
    dtype = getattr(torch, args.dtype)
    weights = {k: v.to(args.device, dtype)
               for k, v in common.read_model(torch, args.model_dir).items()}
    forward = Forward(torch, config, weights, args.device)
    with torch.no_grad():
        tokens, margin = greedy(torch, forward, prompt, args.new_tokens)
    result = {"tokens": tokens, "min_margin": margin}
    print(json.dumps(result))
    common.write_json(args.json, result)


if __name__ == "__main__":
    main()
