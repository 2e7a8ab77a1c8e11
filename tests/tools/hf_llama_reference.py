#!/usr/bin/env python3
"""Mean next-token loss of a Hugging Face LlamaForCausalLM, in plain Python.

An independent reference for trellis's Llama and its converter: it reads the
Hugging Face directory itself (config.json, model.safetensors or the shards
model.safetensors.index.json names; F32, F16 and BF16) and computes the
forward pass as transformers' modeling_llama does: RMSNorm, rotate_half RoPE
with LlamaRotaryEmbedding's inv_freq (and the llama3 rescaling), grouped-query
attention by repeat_kv, causal softmax attention, the SiLU-gated MLP, the
head (tied to the embedding when tie_word_embeddings), and the mean
cross-entropy of each next token. Standard library only, in float64.

  hf_llama_reference.py MODEL_DIR TOKENS_FILE SEQ_LEN WINDOWS
      [--rope_pairing=halves|interleaved]

TOKENS_FILE holds whitespace-separated token ids; window i is the SEQ_LEN + 1
tokens from offset i * (SEQ_LEN + 1), as trellis-eval takes them. Prints
{"loss": mean over all predicted tokens, "windows": WINDOWS} on one line.
--rope_pairing=interleaved rotates pairs (2i, 2i + 1) instead of HF's
(i, i + D/2): a deliberately wrong model, for tests to show they can tell.
"""

import json
import math
import os
import struct
import sys


def read_safetensors(path):
    """{name: (shape, flat list of floats)} of one safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[begin:end]
        dtype = entry["dtype"]
        if dtype == "F32":
            values = list(struct.unpack("<%df" % (len(raw) // 4), raw))
        elif dtype == "F16":
            values = list(struct.unpack("<%de" % (len(raw) // 2), raw))
        elif dtype == "BF16":
            halves = struct.unpack("<%dH" % (len(raw) // 2), raw)
            words = struct.pack("<%dI" % len(halves), *[h << 16 for h in halves])
            values = list(struct.unpack("<%df" % len(halves), words))
        else:
            raise ValueError("%s: tensor %s is %s" % (path, name, dtype))
        out[name] = (entry["shape"], values)
    return out


def read_model(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    tensors = {}
    for file in sorted(set(index["weight_map"].values())):
        tensors.update(read_safetensors(os.path.join(model_dir, file)))
    return tensors


def matrix(tensors, name):
    """A 2-D tensor as a list of rows."""
    shape, values = tensors[name]
    rows, cols = shape
    return [values[r * cols:(r + 1) * cols] for r in range(rows)]


def linear(x, w):
    """x @ w.T for x (T, in) and an nn.Linear weight w (out, in)."""
    return [[sum(a * b for a, b in zip(row, wr)) for wr in w] for row in x]


def rms_norm(x, weight, eps):
    out = []
    for row in x:
        scale = 1.0 / math.sqrt(sum(v * v for v in row) / len(row) + eps)
        out.append([w * v * scale for w, v in zip(weight, row)])
    return out


def inv_freq(config, head_dim):
    """LlamaRotaryEmbedding's inverse frequencies (rope_init_fn)."""
    base = config.get("rope_theta", 10000.0)
    freqs = [1.0 / base ** (i / head_dim) for i in range(0, head_dim, 2)]
    scaling = config.get("rope_scaling")
    if not scaling:
        return freqs
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "default":
        return freqs
    if kind != "llama3":
        raise ValueError("rope_scaling type %r" % kind)
    factor = scaling["factor"]
    low = scaling["low_freq_factor"]
    high = scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(f)
        elif wavelen > low_wavelen:
            out.append(f / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return out


def rotate_half(x):
    half = len(x) // 2
    return [-v for v in x[half:]] + x[:half]


def apply_rope(head, t, freqs, pairing):
    """One head's vector at position t, rotated."""
    d = len(head)
    if pairing == "interleaved":
        out = list(head)
        for i in range(d // 2):
            c, s = math.cos(t * freqs[i]), math.sin(t * freqs[i])
            a, b = head[2 * i], head[2 * i + 1]
            out[2 * i], out[2 * i + 1] = a * c - b * s, b * c + a * s
        return out
    angles = [t * f for f in freqs] * 2  # emb = cat(freqs, freqs)
    rotated = rotate_half(head)
    return [h * math.cos(a) + r * math.sin(a)
            for h, r, a in zip(head, rotated, angles)]


def attention(q, k, v, n_head, n_kv, head_dim, freqs, pairing):
    seq = len(q)
    n_rep = n_head // n_kv
    out = [[0.0] * (n_head * head_dim) for _ in range(seq)]

    def heads(x, n):
        return [[apply_rope(x[t][h * head_dim:(h + 1) * head_dim], t, freqs,
                            pairing) for t in range(seq)] for h in range(n)]

    qh, kh = heads(q, n_head), heads(k, n_kv)
    for h in range(n_head):
        g = h // n_rep  # repeat_kv: kv head g serves heads g·n_rep, …
        for t in range(seq):
            scores = [sum(a * b for a, b in zip(qh[h][t], kh[g][s])) /
                      math.sqrt(head_dim) for s in range(t + 1)]
            top = max(scores)
            p = [math.exp(x - top) for x in scores]
            z = sum(p)
            for j in range(head_dim):
                out[t][h * head_dim + j] = sum(
                    p[s] * v[s][g * head_dim + j] for s in range(t + 1)) / z
    return out


def window_loss(config, tensors, tokens, pairing):
    c = config["hidden_size"]
    n_head = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_head)
    head_dim = c // n_head
    eps = config.get("rms_norm_eps", 1e-6)
    freqs = inv_freq(config, head_dim)
    embed = matrix(tensors, "model.embed_tokens.weight")
    head = embed
    if not config.get("tie_word_embeddings", False):
        head = matrix(tensors, "lm_head.weight")
    inputs, targets = tokens[:-1], tokens[1:]
    x = [list(embed[t]) for t in inputs]
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        h = rms_norm(x, tensors[p + "input_layernorm.weight"][1], eps)
        q = linear(h, matrix(tensors, p + "self_attn.q_proj.weight"))
        k = linear(h, matrix(tensors, p + "self_attn.k_proj.weight"))
        v = linear(h, matrix(tensors, p + "self_attn.v_proj.weight"))
        a = attention(q, k, v, n_head, n_kv, head_dim, freqs, pairing)
        o = linear(a, matrix(tensors, p + "self_attn.o_proj.weight"))
        x = [[xi + oi for xi, oi in zip(xr, orow)] for xr, orow in zip(x, o)]
        h = rms_norm(x, tensors[p + "post_attention_layernorm.weight"][1], eps)
        gate = linear(h, matrix(tensors, p + "mlp.gate_proj.weight"))
        up = linear(h, matrix(tensors, p + "mlp.up_proj.weight"))
        act = [[g / (1 + math.exp(-g)) * u for g, u in zip(gr, ur)]
               for gr, ur in zip(gate, up)]
        m = linear(act, matrix(tensors, p + "mlp.down_proj.weight"))
        x = [[xi + mi for xi, mi in zip(xr, mr)] for xr, mr in zip(x, m)]
    x = rms_norm(x, tensors["model.norm.weight"][1], eps)
    logits = linear(x, head)
    total = 0.0
    for row, target in zip(logits, targets):
        top = max(row)
        lse = top + math.log(sum(math.exp(v - top) for v in row))
        total += lse - row[target]
    return total / len(targets)


def main(argv):
    pairing = "halves"
    args = []
    for a in argv[1:]:
        if a.startswith("--rope_pairing="):
            pairing = a.split("=", 1)[1]
        else:
            args.append(a)
    if len(args) != 4 or pairing not in ("halves", "interleaved"):
        sys.exit(__doc__)
    model_dir, tokens_file = args[0], args[1]
    seq_len, windows = int(args[2]), int(args[3])
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    with open(tokens_file) as f:
        tokens = [int(t) for t in f.read().split()]
    tensors = read_model(model_dir)
    losses = []
    for i in range(windows):
        start = i * (seq_len + 1)
        window = tokens[start:start + seq_len + 1]
        if len(window) != seq_len + 1:
            sys.exit("%s holds fewer than %d windows" % (tokens_file, windows))
        losses.append(window_loss(config, tensors, window, pairing))
    print(json.dumps({"loss": sum(losses) / len(losses), "windows": windows}))


if __name__ == "__main__":
    main(sys.argv)
