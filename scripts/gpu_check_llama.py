#!/usr/bin/env python3
"""The inputs and verdicts of the GPU check's Llama sections
(scripts/gpu-check.sh, sections `llama` and `generate`). Python's standard
library only, so it also runs where PyTorch is missing.

    gpu_check_llama.py write DIR
        writes DIR/hf (a small Hugging Face LlamaForCausalLM: config.json
        and model.safetensors, float32), DIR/text.txt (ASCII text for
        trellis-preprocess --tokenizer=byte) and DIR/tokens.txt (the same
        text's byte tokenizer ids, for scripts/torch_reference/
        hf_llama_loss.py)
    gpu_check_llama.py loss EVAL_LOG TORCH_JSON [--tolerance 1e-3]
        [--device cuda]
        compares trellis-eval's eval_loss (its JSON line in EVAL_LOG) with
        hf_llama_loss.py's; exits 1 when they differ by more than the
        tolerance or either is missing ("skipped" from PyTorch passes with
        a note)
    gpu_check_llama.py tokens CPU_LOG DEVICE_LOG [--device cuda]
        compares the token ids of two trellis-generate runs (their JSON
        lines), on the CPU and on the device; exits 1 at the first
        difference

The model: 2 layers, hidden 256, 4 heads of 64 (2 key/value heads),
SiLU MLP 512, untied head, vocabulary 257 (the byte tokenizer's), context
SEQ_LEN. Its weights are a fixed pseudo-random sequence scaled so that
attention is peaked and the head's logits are far apart: the loss depends
on every part of the forward pass and greedy decoding meets no near-ties.
"""

import argparse
import json
import math
import os
import random
import struct
import sys

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 2, 256, 4, 2, 512, 257
SEQ_LEN = 64


def tensors():
    """(name, shape, scale, offset) in state-dict order; values are
    offset + scale * uniform(-1, 1)."""
    c, kv, f, v = HIDDEN, KV_HEADS * (HIDDEN // HEADS), FFN, VOCAB
    t = [("model.embed_tokens.weight", [v, c], 1.0, 0.0)]
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        t += [(p + "self_attn.q_proj.weight", [c, c], 3.0 / math.sqrt(c), 0),
              (p + "self_attn.k_proj.weight", [kv, c], 3.0 / math.sqrt(c), 0),
              (p + "self_attn.v_proj.weight", [kv, c], 1.7 / math.sqrt(c), 0),
              (p + "self_attn.o_proj.weight", [c, c], 1.0 / math.sqrt(c), 0),
              (p + "mlp.gate_proj.weight", [f, c], 1.7 / math.sqrt(c), 0),
              (p + "mlp.up_proj.weight", [f, c], 1.7 / math.sqrt(c), 0),
              (p + "mlp.down_proj.weight", [c, f], 1.0 / math.sqrt(f), 0),
              (p + "input_layernorm.weight", [c], 0.2, 1.0),
              (p + "post_attention_layernorm.weight", [c], 0.2, 1.0)]
    t += [("model.norm.weight", [c], 0.2, 1.0),
          ("lm_head.weight", [v, c], 6.0 / math.sqrt(c), 0.0)]
    return t


def write_model(hf):
    os.makedirs(hf, exist_ok=True)
    rng = random.Random(20261124)
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, shape, scale, base in tensors():
        n = math.prod(shape)
        blob = struct.pack(f"<{n}f", *(base + scale * rng.uniform(-1, 1)
                                       for _ in range(n)))
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(hf, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": HIDDEN, "intermediate_size": FFN,
        "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS, "max_position_embeddings": SEQ_LEN,
        "vocab_size": VOCAB, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "float32"}
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write_text(d):
    """Pseudo-random lowercase words on one line (no blank lines or
    carriage returns, which the byte tokenizer would keep anyway)."""
    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                     for _ in range(rng.randint(1, 8))) for _ in range(1500)]
    text = " ".join(words) + "\n"
    with open(os.path.join(d, "text.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(d, "tokens.txt"), "w") as f:
        f.write("\n".join(str(b) for b in text.encode()) + "\n")


def json_line(path, key):
    """The first {...} line of the file at `path` that holds `key`."""
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if isinstance(j, dict) and key in j:
                return j
    return None


def compare_loss(args):
    ours = json_line(args.eval_log, "eval_loss")
    if ours is None:
        sys.exit(f"FAIL: no eval_loss JSON line in {args.eval_log}")
    try:
        with open(args.torch_json) as f:
            ref = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"FAIL: no PyTorch result in {args.torch_json} ({e})")
    if "skipped" in ref:
        print(f"trellis-eval --device={args.device}: loss "
              f"{ours['eval_loss']:.6f}; "
              f"PyTorch reference skipped: {ref['skipped']}")
        return
    diff = abs(ours["eval_loss"] - ref["loss"])
    verdict = "ok" if diff <= args.tolerance else "FAIL"
    print(f"{verdict}: trellis-eval --device={args.device} loss "
          f"{ours['eval_loss']:.6f}, PyTorch (float64, {args.device}) "
          f"{ref['loss']:.6f}, difference "
          f"{diff:.2e} (tolerance {args.tolerance:g}; uniform would be "
          f"{math.log(VOCAB):.4f})")
    if diff > args.tolerance or math.isnan(diff):
        sys.exit(1)


def compare_tokens(args):
    runs = {}
    for name, path in (("cpu", args.cpu_log), ("device", args.device_log)):
        j = json_line(path, "tokens")
        if j is None:
            sys.exit(f"FAIL: no tokens JSON line in {path}")
        runs[name] = j["tokens"]
    cpu, ours = runs["cpu"], runs["device"]
    print(f"greedy tokens, cpu: {cpu}\ngreedy tokens, {args.device}: {ours}")
    if not cpu:
        sys.exit("FAIL: the CPU run generated no tokens")
    if cpu != ours:
        first = next((i for i, (a, b) in enumerate(zip(cpu, ours)) if a != b),
                     min(len(cpu), len(ours)))
        sys.exit(f"FAIL: the {args.device} tokens differ from the cpu's at "
                 f"new token {first} of {len(cpu)}")
    print(f"ok: {len(cpu)} greedy tokens equal on cpu and {args.device}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir")
    lo = sub.add_parser("loss")
    lo.add_argument("eval_log")
    lo.add_argument("torch_json")
    lo.add_argument("--tolerance", type=float, default=1e-3)
    lo.add_argument("--device", default="cuda")
    to = sub.add_parser("tokens")
    to.add_argument("cpu_log")
    to.add_argument("device_log")
    to.add_argument("--device", default="cuda")
    args = p.parse_args()
    if args.command == "write":
        os.makedirs(args.dir, exist_ok=True)
        write_model(os.path.join(args.dir, "hf"))
        write_text(args.dir)
    elif args.command == "loss":
        compare_loss(args)
    else:
        compare_tokens(args)


if __name__ == "__main__":
    main()
