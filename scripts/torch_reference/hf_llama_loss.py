#!/usr/bin/env python3
"""Mean next-token loss of a Hugging Face LlamaForCausalLM directory, in
plain PyTorch (no transformers), to check trellis-eval of a converted
checkpoint against.

    hf_llama_loss.py MODEL_DIR TOKENS_FILE SEQ_LEN WINDOWS
        [--device cpu|cuda] [--dtype float64|float32] [--json OUT]

It computes what tests/tools/hf_llama_reference.py computes in plain
Python, with torch tensors, so it runs on full-size models too: it reads
config.json and the safetensors (model.safetensors, or the shards that
model.safetensors.index.json names; F32, F16, BF16) itself, and follows
transformers' modeling_llama: RMSNorm (x · rsqrt(mean x² + eps) · w),
rotate_half RoPE with LlamaRotaryEmbedding's inv_freq and the llama3
rescaling, grouped-query attention by repeat_kv, causal softmax attention,
the SiLU-gated MLP, the head tied to the embedding when
tie_word_embeddings. TOKENS_FILE holds whitespace-separated token ids;
window i is the SEQ_LEN + 1 tokens from offset i · (SEQ_LEN + 1), as
trellis-eval takes them (trellis-eval --max_windows=WINDOWS on the same
tokens). Prints {"loss": ..., "windows": ...}; --json writes it too.
Without PyTorch it writes {"skipped": ...} and exits 0.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def inv_freq(torch, config, head_dim):
    base = config.get("rope_theta", 10000.0)
    freqs = 1.0 / base ** (
        torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return freqs
    if kind != "llama3":
        raise ValueError(f"rope_scaling type {kind!r} is not implemented")
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / freqs
    scaled = torch.where(wavelen > old / low, freqs / factor, freqs)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)


def rotate_half(torch, x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms_norm(torch, x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def logits(torch, config, w, inputs):
    """The next-token logits (B, T, V) of token ids `inputs` (B, T)."""
    c = config["hidden_size"]
    n_head = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_head)
    d = c // n_head
    eps = config.get("rms_norm_eps", 1e-6)
    b, t = inputs.shape
    angles = torch.outer(torch.arange(t, dtype=torch.float64),
                         inv_freq(torch, config, d))
    emb = torch.cat((angles, angles), dim=-1).to(w["model.norm.weight"])
    cos, sin = emb.cos(), emb.sin()
    mask = torch.tril(torch.ones(t, t, device=inputs.device)).bool()
    x = w["model.embed_tokens.weight"][inputs]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(torch, x, w[p + "input_layernorm.weight"], eps)

        def heads(name, n, h=h, p=p):
            return (h @ w[p + name].T).view(b, t, n, d).transpose(1, 2)

        q = heads("self_attn.q_proj.weight", n_head)
        k = heads("self_attn.k_proj.weight", n_kv)
        v = heads("self_attn.v_proj.weight", n_kv)
        q = q * cos + rotate_half(torch, q) * sin
        k = k * cos + rotate_half(torch, k) * sin
        k = k.repeat_interleave(n_head // n_kv, dim=1)  # repeat_kv
        v = v.repeat_interleave(n_head // n_kv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(~mask, float("-inf"))
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(torch, x, w[p + "post_attention_layernorm.weight"], eps)
        gate = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(torch, x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"]
    if not config.get("tie_word_embeddings", False):
        head = w["lm_head.weight"]
    return x @ head.T


def loss(torch, config, w, tokens):
    """Mean next-token loss of windows `tokens` (B, T + 1)."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    out = logits(torch, config, w, inputs)
    return torch.nn.functional.cross_entropy(
        out.reshape(-1, out.shape[-1]), targets.reshape(-1)).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("tokens_file")
    ap.add_argument("seq_len", type=int)
    ap.add_argument("windows", type=int)
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
        result = {"loss": loss(torch, config, weights, tokens),
                  "windows": args.windows}
    print(json.dumps(result))
    common.write_json(args.json, result)


if __name__ == "__main__":
    main()
