#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention, causal, at the shapes that
trellis-attention-bench times, on the same device: forward alone and
forward + backward, median of --reps after --warmup, timed with CUDA events.

    sdpa_bench.py --from attention.json --json sdpa.json
    sdpa_bench.py --shapes 8x1024x12x64,4x1024x20x64 --device cuda

--from reads the shapes (B, T, H, D and their names) from
trellis-attention-bench's --json output, so both time the same problems.
Q, K and V are separate (B, H, T, D) tensors, as SDPA takes them. Each
backend in --backends is timed: "default" lets PyTorch choose; "flash",
"cudnn" and "efficient" force one (PyTorch 2.3 or newer), and a backend
that refuses a shape is reported with its error. FLOPs count the causal
half: forward 4·B·H·T²·D / 2, backward 2.5 times that, as the trellis
program counts them. Without PyTorch or a CUDA device it writes
{"skipped": ...} and exits 0.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
            "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}


def read_shapes(args):
    if args.from_json:
        with open(args.from_json) as f:
            ours = json.load(f)
        return [{k: s[k] for k in ("name", "B", "T", "H", "D")}
                for s in ours["shapes"]]
    return [common.parse_shape(s) for s in args.shapes.split(",") if s]


def backend_context(torch, name):
    """A context manager that forces `name`, or None for "default"."""
    if name == "default":
        return None
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        raise RuntimeError(f"PyTorch {torch.__version__} cannot force a "
                           "backend (torch.nn.attention needs 2.3)")
    if name not in BACKENDS or not hasattr(SDPBackend, BACKENDS[name]):
        raise RuntimeError(f"no SDPA backend '{name}' in this PyTorch")
    return sdpa_kernel([getattr(SDPBackend, BACKENDS[name])])


def time_backend(torch, args, shape, backend):
    F = torch.nn.functional
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    b, t, h, d = shape["B"], shape["T"], shape["H"], shape["D"]
    gen = torch.Generator(device=args.device).manual_seed(1)

    def rand(*size, grad=False):
        x = torch.rand(*size, generator=gen, device=args.device) * 2 - 1
        return x.to(dtype).requires_grad_(grad)

    q, k, v = (rand(b, h, t, d, grad=True) for _ in range(3))
    dout = rand(b, h, t, d)

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward():
        for x in (q, k, v):
            x.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)

    ctx = backend_context(torch, backend)
    if ctx is not None:
        ctx.__enter__()
    try:
        fwd = common.time_ms(torch, args.device, forward, args.warmup,
                             args.reps)
        both = common.time_ms(torch, args.device, forward_backward,
                              args.warmup, args.reps)
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    flops = 2.0 * b * h * t * t * d
    fwd_ms, both_ms = common.median(fwd), common.median(both)
    return {"backend": backend, "forward_ms": fwd_ms,
            "forward_backward_ms": both_ms,
            "forward_tflops": flops / (1e9 * fwd_ms),
            "forward_backward_tflops": 3.5 * flops / (1e9 * both_ms)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="from_json",
                   help="trellis-attention-bench --json output to take "
                   "the shapes from")
    p.add_argument("--shapes", default="8x1024x12x64,8x1024x16x64,"
                   "4x1024x20x64", help="BxTxHxD,... when no --from")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--backends", default="default,flash,cudnn")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    shapes = read_shapes(args)
    torch = common.import_torch(args.json, args.device)

    result = {"env": common.environment(torch, args.device),
              "dtype": args.dtype, "causal": True, "warmup": args.warmup,
              "reps": args.reps, "shapes": []}
    print(f"PyTorch {torch.__version__} SDPA on "
          f"{result['env']['device_name']}, {args.dtype}, causal; median "
          f"of {args.reps}\n")
    print("| shape (B×T×H×D) | backend | fwd ms | fwd TFLOP/s | fwd+bwd ms "
          "| fwd+bwd TFLOP/s |\n|---|---|---|---|---|---|")
    for shape in shapes:
        label = (f"{shape['name']} ({shape['B']}×{shape['T']}×"
                 f"{shape['H']}×{shape['D']})")
        entry = dict(shape, label=label, backends=[])
        for backend in args.backends.split(","):
            try:
                r = time_backend(torch, args, shape, backend)
            except RuntimeError as e:
                first = str(e).strip().splitlines()[0][:160]
                entry["backends"].append({"backend": backend, "error": first})
                print(f"| {label} | {backend} | refused: {first} | | | |")
                continue
            entry["backends"].append(r)
            print(f"| {label} | {backend} | {r['forward_ms']:.3f} | "
                  f"{r['forward_tflops']:.3g} | "
                  f"{r['forward_backward_ms']:.3f} | "
                  f"{r['forward_backward_tflops']:.3g} |", flush=True)
        result["shapes"].append(entry)
    common.write_json(args.json, result)


if __name__ == "__main__":
    main()
