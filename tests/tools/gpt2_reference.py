#!/usr/bin/env python3
"""An independent GPT-2 greedy decoder in plain Python (standard library only).

Reads a Hugging Face GPT-2 directory (config.json and model.safetensors, as
`trellis-convert --to=hf` writes them), runs the full forward of the whole
sequence for every new token (no cache), and prints the greedy new token ids
as one JSON list. Arithmetic in Python floats (float64).

usage: gpt2_reference.py HF_DIR PROMPT_IDS NEW_TOKENS
  PROMPT_IDS: comma-separated token ids
"""

import json
import math
import os
import struct
import sys


def read_safetensors(path):
    """Returns {name: (shape, flat list of floats)}."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[begin:end]
        dtype = entry["dtype"]
        if dtype == "F32":
            values = list(struct.unpack("<%df" % (len(raw) // 4), raw))
        elif dtype == "BF16":
            halves = struct.unpack("<%dH" % (len(raw) // 2), raw)
            values = list(struct.unpack("<%df" % len(halves),
                                        struct.pack("<%dI" % len(halves),
                                                    *[h << 16 for h in halves])))
        elif dtype == "F16":
            values = list(struct.unpack("<%de" % (len(raw) // 2), raw))
        else:
            raise SystemExit("unsupported dtype %s of %s" % (dtype, name))
        tensors[name] = (entry["shape"], values)
    return tensors


class Gpt2:
    def __init__(self, hf_dir):
        with open(os.path.join(hf_dir, "config.json")) as f:
            config = json.load(f)
        self.n_layer = config["n_layer"]
        self.n_head = config["n_head"]
        self.c = config["n_embd"]
        self.vocab = config["vocab_size"]
        self.eps = config.get("layer_norm_epsilon", 1e-5)
        raw = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
        self.t = {}
        for name, value in raw.items():
            if name.startswith("transformer."):
                name = name[len("transformer."):]
            self.t[name] = value

    def rows(self, name):
        """A 2-D tensor as a list of rows."""
        shape, flat = self.t[name]
        cols = shape[1]
        return [flat[i * cols:(i + 1) * cols] for i in range(shape[0])]

    def columns(self, name):
        """A (in, out) Conv1D weight as a list of its out columns."""
        shape, flat = self.t[name]
        rows, cols = shape
        return [flat[j::cols] for j in range(cols)]

    def vector(self, name):
        return self.t[name][1]


def layer_norm(x, w, b, eps):
    n = len(x)
    mean = sum(x) / n
    var = sum((v - mean) ** 2 for v in x) / n
    r = 1.0 / math.sqrt(var + eps)
    return [(v - mean) * r * wi + bi for v, wi, bi in zip(x, w, b)]


def linear(x, columns, bias):
    return [sum(map(float.__mul__, x, col)) + b for col, b in zip(columns, bias)]


def gelu(x):
    k = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + math.tanh(k * (x + 0.044715 * x * x * x)))


def next_logits(m, ids, weights):
    c, h = m.c, m.n_head
    d = c // h
    wte, wpe = weights["wte"], weights["wpe"]
    xs = [[a + p for a, p in zip(wte[tok], wpe[pos])]
          for pos, tok in enumerate(ids)]
    for layer in weights["layers"]:
        qkv = [linear(layer_norm(x, *layer["ln_1"], m.eps), *layer["c_attn"])
               for x in xs]
        att = []
        for i in range(len(xs)):
            out = []
            for head in range(h):
                q = qkv[i][head * d:(head + 1) * d]
                scores = []
                for j in range(i + 1):
                    k = qkv[j][c + head * d:c + (head + 1) * d]
                    scores.append(sum(map(float.__mul__, q, k)) / math.sqrt(d))
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                total = sum(e)
                for ch in range(d):
                    out.append(sum(e[j] * qkv[j][2 * c + head * d + ch]
                                   for j in range(i + 1)) / total)
            att.append(out)
        xs = [[a + b for a, b in zip(x, linear(o, *layer["attn_proj"]))]
              for x, o in zip(xs, att)]
        new = []
        for x in xs:
            hidden = linear(layer_norm(x, *layer["ln_2"], m.eps), *layer["c_fc"])
            hidden = [gelu(v) for v in hidden]
            new.append([a + b for a, b in
                        zip(x, linear(hidden, *layer["mlp_proj"]))])
        xs = new
    last = layer_norm(xs[-1], *weights["ln_f"], m.eps)
    return [sum(map(float.__mul__, last, row)) for row in wte[:m.vocab]]


def load_weights(m):
    layers = []
    for i in range(m.n_layer):
        p = "h.%d." % i
        layers.append({
            "ln_1": (m.vector(p + "ln_1.weight"), m.vector(p + "ln_1.bias")),
            "c_attn": (m.columns(p + "attn.c_attn.weight"),
                       m.vector(p + "attn.c_attn.bias")),
            "attn_proj": (m.columns(p + "attn.c_proj.weight"),
                          m.vector(p + "attn.c_proj.bias")),
            "ln_2": (m.vector(p + "ln_2.weight"), m.vector(p + "ln_2.bias")),
            "c_fc": (m.columns(p + "mlp.c_fc.weight"),
                     m.vector(p + "mlp.c_fc.bias")),
            "mlp_proj": (m.columns(p + "mlp.c_proj.weight"),
                         m.vector(p + "mlp.c_proj.bias")),
        })
    return {"wte": m.rows("wte.weight"), "wpe": m.rows("wpe.weight"),
            "ln_f": (m.vector("ln_f.weight"), m.vector("ln_f.bias")),
            "layers": layers}


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    model = Gpt2(sys.argv[1])
    ids = [int(v) for v in sys.argv[2].split(",")]
    weights = load_weights(model)
    new = []
    for _ in range(int(sys.argv[3])):
        logits = next_logits(model, ids, weights)
        token = max(range(len(logits)), key=lambda v: logits[v])
        new.append(token)
        ids.append(token)
    print(json.dumps(new))


if __name__ == "__main__":
    main()
