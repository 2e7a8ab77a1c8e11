#!/usr/bin/env python3
"""Folds the JSON results of one GPU check (scripts/gpu-check.sh) into
Markdown tables and judges the GPU goals of docs/gpu.md, "The GPU check".

    gpu_check_report.py RESULTS_DIR [--presets "gpt2-124m ..."] [--dry-run]

RESULTS_DIR holds what the check's sections wrote: bench-<preset>.json
(trellis-bench), torch-<preset>.json (scripts/torch_reference/
gpt2_bench.py), llmc-<preset>.json (llm.c's trainer, the peer), attention.json (trellis-attention-bench), sdpa.json
(scripts/torch_reference/sdpa_bench.py) and sections.tsv (name, status,
seconds of each section; its llama and generate rows are goals too). A
missing file shows as "not measured". Exits 1
when a goal is missed or could not be measured, except with --dry-run
(tiny CPU shapes, where the goals mean nothing). Needs only Python's
standard library.
"""

import argparse
import json
import os
import sys

# The goals (docs/gpu.md): MFU floors per preset against the dense bf16
# peak, the tokens/s ratios to compiled PyTorch and to llm.c per preset,
# the attention time ratio, the budget.
MFU_GOALS = {"gpt2-124m": 0.45, "gpt2-350m": 0.50, "gpt2-774m": 0.50,
             "llama-3.2-1b": 0.50}
TORCH_RATIO_GOALS = {"gpt2-124m": 1.3, "gpt2-350m": 1.3}
TORCH_RATIO_GOAL = 1.0
LLMC_RATIO_GOALS = {"gpt2-124m": 1.15, "gpt2-350m": 1.15, "gpt2-774m": 1.0}
ATTENTION_RATIO_GOAL = 1.3
BUDGET_S = 20 * 60
# Largest relative difference from the first path's output and gradient
# for a path to count as correct.
PATH_AGREEMENT = 5e-2


def load(results, name):
    path = os.path.join(results, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def num(x, fmt="{:.1f}"):
    return "n/a" if x is None else fmt.format(x)


def ratio_goal(goals, what, name, ref, ratio, goal):
    """The goal 'tokens/s >= goal x NAME's' from a reference's JSON."""
    what = f"{what} tokens/s >= {goal}x {name}'s"
    if ref is None:
        goals.append((what, None, "not measured"))
    elif "skipped" in ref:
        goals.append((what, "n/a", ref["skipped"]))
    elif ref.get("compiled") is False:  # torch.compile failed
        goals.append((what, None, f"{ratio:.2f}x the eager model"))
    else:
        goals.append((what, ratio >= goal, f"{ratio:.2f}x"))


def reference_rate(ref, ours_rate):
    """(tokens/s, ratio of ours to it, its text) of a reference's JSON."""
    if ref is None:
        return None, None, "n/a"
    if "skipped" in ref:
        return None, None, "skipped"
    rate = ref["tokens_per_s"]
    text = num(rate, "{:,.0f}")
    if ref.get("compiled") is False:
        text += " (eager)"
    return rate, ours_rate / rate, text


def training_table(results, presets, out, goals):
    out.append("| preset | parameters | tokens/step | micro batch | step ms | "
               "tokens/s | model TFLOP/s | MFU | peak memory | "
               "PyTorch tokens/s | PyTorch MFU | trellis / PyTorch | "
               "llm.c tokens/s (micro batch) | trellis / llm.c |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for preset in presets:
        ours = load(results, f"bench-{preset}.json")
        torch = load(results, f"torch-{preset}.json")
        llmc = load(results, f"llmc-{preset}.json")
        if ours is None:
            out.append(f"| {preset} | not measured |" + " |" * 12)
            if preset in MFU_GOALS:
                goals.append((f"MFU of {preset} >= "
                              f"{pct(MFU_GOALS[preset])}", None, "no data"))
            continue
        med = ours["median"]
        t_rate, ratio, t_text = reference_rate(torch, med["tokens_per_s"])
        t_mfu = torch["mfu"] if t_rate is not None else None
        if t_rate is not None and torch.get("shape", {}).get(
                "micro_batch_size"):
            t_text += f" ({torch['shape']['micro_batch_size']})"
        l_rate, l_ratio, l_text = reference_rate(llmc, med["tokens_per_s"])
        if l_rate is not None:
            l_text += f" ({llmc['micro_batch_size']})"
        out.append(
            f"| {preset} | {ours['model']['parameters'] / 1e6:.0f}M | "
            f"{ours['tokens_per_step']:.0f} | "
            f"{ours.get('micro_batch_size', 'n/a')} | {med['ms']:.1f} | "
            f"{med['tokens_per_s']:,.0f} | {med['model_tflops']:.1f} | "
            f"{pct(med['mfu'])} | "
            f"{ours['peak_memory_bytes'] / 2**30:.2f} GiB | {t_text} | "
            f"{pct(t_mfu)} | {num(ratio, '{:.2f}x')} | {l_text} | "
            f"{num(l_ratio, '{:.2f}x')} |")
        if preset in MFU_GOALS:
            goal = MFU_GOALS[preset]
            ok = med["mfu"] is not None and med["mfu"] >= goal
            goals.append((f"MFU of {preset} >= {pct(goal)}", ok,
                          pct(med["mfu"])))
        # A mixture of experts (moe-*) has no PyTorch twin to race.
        if not preset.startswith("moe-"):
            ratio_goal(goals, preset, "compiled PyTorch", torch, ratio,
                       TORCH_RATIO_GOALS.get(preset, TORCH_RATIO_GOAL))
        if preset in LLMC_RATIO_GOALS:
            ratio_goal(goals, preset, "llm.c", llmc, l_ratio,
                       LLMC_RATIO_GOALS[preset])


def agrees(path):
    """Whether a trellis path's results are finite and within
    PATH_AGREEMENT of the first path's (bf16 outputs differ by rounding)."""
    return path["finite"] and max(path["out_diff_vs_first"],
                                  path["grad_diff_vs_first"]) <= PATH_AGREEMENT


def sdpa_reference(sdpa, label):
    """The SDPA entry of a shape: PyTorch's own choice ("default")."""
    for shape in (sdpa or {}).get("shapes", []):
        if shape["label"] == label:
            for b in shape["backends"]:
                if b["backend"] == "default" and "error" not in b:
                    return shape, b
            return shape, None
    return None, None


def attention_table(results, out, goals):
    ours = load(results, "attention.json")
    sdpa = load(results, "sdpa.json")
    if ours is None:
        out.append("attention: not measured")
        goals.append(("best attention <= 1.3x SDPA", None, "no data"))
        return
    if sdpa and "skipped" in sdpa:
        out.append(f"PyTorch SDPA: skipped ({sdpa['skipped']})\n")
    out.append("| shape (B×T×H×D) | kernel | fwd ms | fwd TFLOP/s | "
               "fwd+bwd ms | fwd+bwd TFLOP/s | fwd vs SDPA | "
               "fwd+bwd vs SDPA |")
    out.append("|---|---|---|---|---|---|---|---|")
    for shape in ours["shapes"]:
        label = shape["label"]
        s_shape, ref = sdpa_reference(sdpa, label)
        rows = [(f"trellis {p['path']}" +
                 ("" if agrees(p) else " (WRONG RESULTS)"), p)
                for p in shape["paths"] if not p["same_as_first"]]
        if s_shape:
            rows += [(f"SDPA {b['backend']}", b) for b in s_shape["backends"]
                     if "error" not in b]
        for name, r in rows:
            fr = br = None
            if ref:
                fr = r["forward_ms"] / ref["forward_ms"]
                br = r["forward_backward_ms"] / ref["forward_backward_ms"]
            out.append(
                f"| {label} | {name} | {r['forward_ms']:.3f} | "
                f"{r['forward_tflops']:.3g} | {r['forward_backward_ms']:.3f} "
                f"| {r['forward_backward_tflops']:.3g} | "
                f"{num(fr, '{:.2f}x')} | {num(br, '{:.2f}x')} |")
        what = f"best attention of {label} <= 1.3x SDPA"
        if sdpa and "skipped" in sdpa:
            goals.append((what, "n/a", sdpa["skipped"]))
        elif ref is None:
            goals.append((what, None, "no SDPA result"))
        else:
            valid = [p for p in shape["paths"] if agrees(p)]
            if not valid:
                goals.append((what, False, "no path gave finite results "
                              "that agree with the first path"))
                continue
            best_f = min(p["forward_ms"] for p in valid)
            best_b = min(p["forward_backward_ms"] for p in valid)
            fr = best_f / ref["forward_ms"]
            br = best_b / ref["forward_backward_ms"]
            goals.append((what, max(fr, br) <= ATTENTION_RATIO_GOAL,
                          f"fwd {fr:.2f}x, fwd+bwd {br:.2f}x"))


def sections_goals(results, goals):
    path = os.path.join(results, "sections.tsv")
    if not os.path.exists(path):
        goals.append(("every GPU test passes", None, "no section record"))
        return
    rows = [line.rstrip("\n").split("\t") for line in open(path) if line]
    tests = [r for r in rows if r[0] == "tests"]
    status = tests[0][1] if tests else "not run"
    measured = status
    skipped_path = os.path.join(results, "tests-skipped.txt")
    if os.path.exists(skipped_path):
        skipped = open(skipped_path).read().split()
        measured += f"; {len(skipped)} case(s) skipped"
        if skipped:
            measured += ": " + ", ".join(skipped[:8])
    ok = None if status == "not run" else status == "ok"
    goals.append(("every GPU test passes", ok, measured))
    # The Llama checks, where the check ran them (not in an --only run
    # without them).
    for name, what in (("llama", "converted HF Llama's loss on the GPU "
                        "equals PyTorch's"),
                       ("generate", "greedy tokens on the GPU equal the "
                        "CPU's"),
                       ("memcheck", "compute-sanitizer memcheck clean on "
                        "the kernels' tests")):
        row = [r for r in rows if r[0] == name]
        if row:
            goals.append((what, row[0][1] == "ok", row[0][1]))
    total = sum(float(r[2]) for r in rows)
    goals.append((f"the check within {BUDGET_S // 60} minutes",
                  total <= BUDGET_S, f"{total / 60:.1f} min so far"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results")
    p.add_argument("--presets", default="gpt2-124m gpt2-350m gpt2-774m")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    out, goals = [], []
    out.append("### Training step (trellis-bench against PyTorch and llm.c)\n")
    training_table(args.results, args.presets.split(), out, goals)
    out.append("\n### Attention alone (trellis against PyTorch SDPA)\n")
    attention_table(args.results, out, goals)
    sections_goals(args.results, goals)
    out.append("\n### Goals\n")
    out.append("| goal | result | measured |")
    out.append("|---|---|---|")
    missed = 0
    for what, ok, measured in goals:
        verdict = {True: "met", False: "MISSED", None: "NOT MEASURED",
                   "n/a": "n/a"}[ok]
        if args.dry_run:
            verdict = "not judged (dry run)"
        elif ok is False or ok is None:
            missed += 1
        out.append(f"| {what} | {verdict} | {measured} |")
    print("\n".join(out))
    if missed:
        print(f"\n{missed} goal(s) missed or not measured")
        sys.exit(1)


if __name__ == "__main__":
    main()
