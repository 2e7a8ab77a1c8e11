#!/usr/bin/env python3
"""A PyTorch Llama of the same shape as a trellis-bench run, trained on
random tokens, for tokens/s on the same GPU in the same sitting.

    llama_bench.py --from bench-llama-3.2-1b.json --json torch-llama-3.2-1b.json
    llama_bench.py --preset llama-3.2-1b --device cuda

The same command line, training loop and report as gpt2_bench.py (--from
reads trellis-bench's --json output, which carries the Llama fields:
key/value heads, MLP width, RoPE base, tied head), with the model as
trellis builds a Llama: RMSNorm before attention and MLP (weights, no
biases), one projection to queries, keys and values with grouped-query
attention (F.scaled_dot_product_attention(is_causal=True, enable_gqa=True),
the key/value heads repeated where that PyTorch lacks enable_gqa), RoPE on
queries and keys in the half-split layout, the SwiGLU MLP (gate and up in
one projection, then down), no biases anywhere, the LM head tied to the
token embedding unless the shape unties it. With --from, the PyTorch
model's parameter count must equal trellis's, or it stops: the two must
do the same arithmetic.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_bench  # noqa: E402

# Without --from: (layers, heads, width, micro batch) and the other fields.
PRESETS = {"llama-3.2-1b": (16, 32, 2048, 16)}
DEFAULTS = {"llama-3.2-1b": dict(vocab_size=128256, n_kv_heads=8,
                                 ffn_hidden=8192, rope_theta=500000.0,
                                 norm_eps=1e-5, tie_embeddings=True)}


def build_model(torch, s):
    nn, F = torch.nn, torch.nn.functional
    c, h = s["d_model"], s["n_head"]
    kv = s.get("n_kv_heads") or h
    d = c // h
    ffn = s["ffn_hidden"]
    eps = s.get("norm_eps", 1e-5)
    gqa_native = "enable_gqa" in (F.scaled_dot_product_attention.__doc__
                                  or "")

    class RmsNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(c))

        def forward(self, x):
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            return (y * self.weight.float()).to(x.dtype)

    def rope(z, cos, sin):
        # Half-split pairs (i, i + d/2), as trellis and Hugging Face rotate.
        z1, z2 = z[..., :d // 2], z[..., d // 2:]
        return torch.cat((z1 * cos - z2 * sin, z2 * cos + z1 * sin),
                         dim=-1).to(z.dtype)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm, self.mlp_norm = RmsNorm(), RmsNorm()
            self.qkv = nn.Linear(c, c + 2 * kv * d, bias=False)
            self.o_proj = nn.Linear(c, c, bias=False)
            self.gate_up = nn.Linear(c, 2 * ffn, bias=False)
            self.down = nn.Linear(ffn, c, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.attn_norm(x)).split(
                [c, kv * d, kv * d], dim=2)
            q = rope(q.view(b, t, h, d).transpose(1, 2), cos, sin)
            k = rope(k.view(b, t, kv, d).transpose(1, 2), cos, sin)
            v = v.view(b, t, kv, d).transpose(1, 2)
            if gqa_native:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                   enable_gqa=kv != h)
            else:
                k = k.repeat_interleave(h // kv, dim=1)
                v = v.repeat_interleave(h // kv, dim=1)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o_proj(y.transpose(1, 2).reshape(b, t, c))
            gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(s["vocab_size"], c)
            self.blocks = nn.ModuleList(Block() for _ in range(s["n_layer"]))
            self.norm = RmsNorm()
            self.tied = s.get("tie_embeddings", True)
            if not self.tied:
                self.lm_head = nn.Linear(c, s["vocab_size"], bias=False)
            inv = 1.0 / (s.get("rope_theta", 10000.0)**(
                torch.arange(0, d, 2, dtype=torch.float32) / d))
            angles = torch.outer(
                torch.arange(s["seq_len"], dtype=torch.float32), inv)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            t = idx.shape[1]
            cos, sin = self.cos[:t], self.sin[:t]
            x = self.embed(idx)
            for block in self.blocks:
                x = block(x, cos, sin)
            head = self.embed.weight if self.tied else self.lm_head.weight
            logits = F.linear(self.norm(x), head)
            return F.cross_entropy(
                logits.float().reshape(-1, logits.size(-1)),
                targets.reshape(-1))

    return Llama()


if __name__ == "__main__":
    gpt2_bench.main(doc=__doc__, build=build_model, presets=PRESETS,
                    defaults=DEFAULTS, name="llama_bench", label="Llama",
                    default_preset="llama-3.2-1b", default_seq_len=2048)
