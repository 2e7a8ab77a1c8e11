#!/usr/bin/env python3
"""A PyTorch GPT-2 of the same shape as a trellis-bench run, trained on
random tokens, for tokens/s on the same GPU in the same sitting.

    gpt2_bench.py --from bench-gpt2-124m.json --json torch-gpt2-124m.json
    gpt2_bench.py --preset gpt2-350m --device cuda

--from reads trellis-bench's --json output: layers, heads, width, seq_len,
vocabulary, micro and global batch, the number of timed and warm-up steps
and the peak the MFU is taken against, so both programs train the same
model on the same batch. Without --from, --preset and the flags below give
the shape (the presets' micro batches are trellis-bench's on CUDA: four
micro batches per step).

The model is GPT-2 as trellis builds it: learned position embeddings,
pre-LayerNorm blocks with biases, GELU (tanh), the LM head tied to the token
embedding, vocabulary 50257 unpadded, no dropout. Attention is
F.scaled_dot_product_attention(is_causal=True). float32 master weights
under bf16 autocast (--precision bf16-weights keeps the weights in bf16),
torch.compile (--no-compile to leave it out), fused AdamW, gradient
clipping at 1.0, and gradient accumulation over the micro batches of a
step, as trellis-bench's step does. Step time is the wall time of a whole
step after a device synchronize; the median over the timed steps gives
tokens/s and the model FLOP rate by trellis's count (6·N + 6·L·C·T per
token, N the parameters with the tied embedding once). Compilation happens
in the warm-up steps and is reported apart. Without PyTorch or a CUDA
device it writes {"skipped": ...} and exits 0. Where torch.compile fails,
it says why and times the eager model ("compiled": false in the JSON).
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# trellis-bench's presets on CUDA: (layers, heads, width, micro batch).
PRESETS = {"gpt2-124m": (12, 12, 768, 8), "gpt2-350m": (24, 16, 1024, 8),
           "gpt2-774m": (36, 20, 1280, 4), "gpt2-1558m": (48, 25, 1600, 2)}


# The model fields a --from JSON may carry beyond GPT-2's (llama_bench.py
# reads them); absent ones stay out of the shape.
EXTRA_MODEL_FIELDS = ("family", "n_kv_heads", "ffn_hidden", "rope_theta",
                      "norm_eps", "tie_embeddings", "parameters")


def shape_from_args(args, presets=None, defaults=None, name="gpt2_bench"):
    """The run's shape: from --from's JSON, else from --preset in
    `presets` (name: (layers, heads, width, micro batch)) with the other
    model fields of `defaults` (name: {field: value}, e.g. the
    vocabulary) added."""
    presets = PRESETS if presets is None else presets
    if args.from_json:
        with open(args.from_json) as f:
            ours = json.load(f)
        m = ours["model"]
        shape = dict(n_layer=m["n_layer"], n_head=m["n_head"],
                     d_model=m["d_model"], seq_len=m["seq_len"],
                     vocab_size=m["vocab_size"],
                     micro_batch_size=ours["micro_batch_size"],
                     global_batch_size=ours["global_batch_size"],
                     steps=len(ours["steps"]) or args.steps,
                     warmup=max(ours["warmup_steps"], args.warmup),
                     peak_tflops=ours.get("peak_tflops") or args.peak_tflops,
                     preset=ours.get("preset") or "custom")
        shape.update({k: m[k] for k in EXTRA_MODEL_FIELDS if k in m})
        return shape
    if args.preset not in presets:
        sys.exit(f"{name}: --preset {args.preset} is not one of "
                 f"{', '.join(presets)}; or pass --from")
    n_layer, n_head, d_model, micro = presets[args.preset]
    shape = dict(n_layer=n_layer, n_head=n_head, d_model=d_model,
                 seq_len=args.seq_len, vocab_size=50257,
                 micro_batch_size=micro, global_batch_size=4 * micro,
                 steps=args.steps, warmup=args.warmup,
                 peak_tflops=args.peak_tflops, preset=args.preset)
    shape.update((defaults or {}).get(args.preset, {}))
    return shape


def build_model(torch, s):
    nn, F = torch.nn, torch.nn.functional
    c, h = s["d_model"], s["n_head"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, h, c // h).transpose(1, 2)
                       for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
            m = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
            return x + self.mlp_proj(m)

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(s["vocab_size"], c)
            self.wpe = nn.Embedding(s["seq_len"], c)
            self.blocks = nn.ModuleList(Block() for _ in range(s["n_layer"]))
            self.ln_f = nn.LayerNorm(c)
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            t = idx.shape[1]
            pos = torch.arange(t, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
            return F.cross_entropy(
                logits.float().reshape(-1, logits.size(-1)),
                targets.reshape(-1))

    return Gpt()


def train(torch, args, s, build=build_model):
    """Runs the steps of the model `build` makes; returns (step seconds of
    the timed steps, compile and warm-up seconds, parameters, peak memory
    bytes)."""
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    model = build(torch, s).to(args.device)
    if args.precision == "bf16-weights":
        model = model.to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    fused = {"fused": True} if args.device == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95),
                            weight_decay=0.1, **fused)
    step_model = model if args.no_compile else torch.compile(model)
    micro, accum = s["micro_batch_size"], s["global_batch_size"] // s[
        "micro_batch_size"]
    gen = torch.Generator(device=args.device).manual_seed(1)
    tokens = torch.randint(0, s["vocab_size"] - 1,
                           (accum, micro, s["seq_len"] + 1), generator=gen,
                           device=args.device)
    autocast = torch.autocast(args.device, dtype=torch.bfloat16,
                              enabled=args.precision == "bf16")

    def step():
        for i in range(accum):
            with autocast:
                loss = step_model(tokens[i, :, :-1], tokens[i, :, 1:])
            (loss / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    for _ in range(s["warmup"]):
        loss = step()
    sync()
    warmup_s = time.perf_counter() - t0
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(s["steps"]):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
    if not math.isfinite(loss.item()):
        raise RuntimeError(f"the loss is {loss.item()}")
    peak = torch.cuda.max_memory_allocated() if args.device == "cuda" else 0
    return times, warmup_s, params, peak


def main(doc=__doc__, build=build_model, presets=None, defaults=None,
         name="gpt2_bench", label="GPT-2", default_preset="gpt2-124m",
         default_seq_len=1024):
    """The command line of a model bench: `build` makes the model, the
    other arguments name it and give its presets (shape_from_args)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--from", dest="from_json",
                   help="trellis-bench --json output to copy the run from")
    p.add_argument("--preset", default=default_preset)
    p.add_argument("--seq_len", type=int, default=default_seq_len)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed steps first (compilation happens here); "
                   "with --from, at least this many")
    p.add_argument("--peak_tflops", type=float, default=989.0)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--precision", default="bf16",
                   choices=["bf16", "bf16-weights", "fp32"])
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--micro_batch_size", type=int, default=0,
                   help="PyTorch's own micro batch (0: the shape's); the "
                   "tokens per step stay the shape's")
    p.add_argument("--json", help="write the summary here")
    args = p.parse_args()
    s = shape_from_args(args, presets, defaults, name)
    if args.micro_batch_size:
        if (args.micro_batch_size < 1
                or s["global_batch_size"] % args.micro_batch_size):
            sys.exit(f"{name}: --micro_batch_size "
                     f"{args.micro_batch_size} does not divide the global "
                     f"batch {s['global_batch_size']}")
        s["micro_batch_size"] = args.micro_batch_size
    torch = common.import_torch(args.json, args.device)
    if args.device == "cuda":
        torch.set_float32_matmul_precision("highest")

    compile_error = None
    try:
        times, warmup_s, params, peak = train(torch, args, s, build)
    except Exception as e:  # noqa: BLE001 (any compiler failure)
        if args.no_compile:
            raise
        compile_error = str(e).strip().splitlines()[0][:300]
        print(f"torch.compile failed ({compile_error}); timing the eager "
              "model instead")
        args.no_compile = True
        if args.device == "cuda":
            torch.cuda.empty_cache()
        times, warmup_s, params, peak = train(torch, args, s, build)
    if s.get("parameters") and s["parameters"] != params:
        sys.exit(f"{name}: the PyTorch model has {params} parameters, "
                 f"trellis's {s['parameters']}: not the same model")
    step_s = common.median(times)
    tokens = s["global_batch_size"] * s["seq_len"]
    flops_per_token = 6.0 * params + 6.0 * s["n_layer"] * s["d_model"] * s[
        "seq_len"]
    tflops = flops_per_token * tokens / step_s / 1e12
    result = {"env": common.environment(torch, args.device), "shape": s,
              "precision": args.precision, "compiled": not args.no_compile,
              "parameters": params, "tokens_per_step": tokens,
              "step_ms": [1e3 * t for t in times], "median_ms": 1e3 * step_s,
              "tokens_per_s": tokens / step_s, "model_tflops": tflops,
              "mfu": tflops / s["peak_tflops"] if s["peak_tflops"] else None,
              "warmup_s": warmup_s, "peak_memory_bytes": peak,
              "compile_error": compile_error}
    mfu = f"{100 * result['mfu']:.1f}%" if result["mfu"] else "n/a"
    print(f"PyTorch {torch.__version__} {label} {s['preset']} on "
          f"{result['env']['device_name']}: {params / 1e6:.1f}M parameters, "
          f"{tokens} tokens/step ({s['micro_batch_size']} x "
          f"{s['global_batch_size'] // s['micro_batch_size']} micro batches "
          f"of {s['seq_len']}), {args.precision}, "
          f"{'compiled' if not args.no_compile else 'eager'}")
    print(f"warm-up (compilation included): {warmup_s:.1f} s over "
          f"{s['warmup']} steps")
    print(f"median step {1e3 * step_s:.1f} ms: {tokens / step_s:,.0f} "
          f"tokens/s, {tflops:.1f} TFLOP/s, MFU {mfu}, peak memory "
          f"{peak / 2**30:.2f} GiB")
    common.write_json(args.json, result)


if __name__ == "__main__":
    main()
