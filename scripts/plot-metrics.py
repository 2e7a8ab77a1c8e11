#!/usr/bin/env python3
"""Plots a trellis --metrics_file (JSON Lines) as an SVG loss curve.

Usage: scripts/plot-metrics.py runs/demo/metrics.jsonl docs/demo-loss.svg [title]
Uses the standard library only.
"""
import json
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else "loss"
    rows = [json.loads(line) for line in open(src) if line.strip()]
    train = [(r["step"], r["loss"]) for r in rows]
    val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    if not train:
        sys.exit(f"{src}: no metrics")
    w, h, left, right, top, bottom = 720, 420, 60, 20, 40, 50
    steps = [s for s, _ in train]
    values = [v for _, v in train + val]
    x0, x1 = min(steps), max(steps)
    y0, y1 = 0.0, max(values) * 1.05
    sx = lambda s: left + (s - x0) / max(1, x1 - x0) * (w - left - right)
    sy = lambda v: top + (1 - (v - y0) / (y1 - y0)) * (h - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for i in range(6):
        v = y0 + (y1 - y0) * i / 5
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    for i in range(6):
        s = x0 + (x1 - x0) * i / 5
        out.append(f'<text x="{sx(s):.1f}" y="{h - bottom + 18}" text-anchor="middle">{s:.0f}</text>')
    out.append(f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">step</text>')
    for series, color, name, dy in ((train, "#1f77b4", "train loss", 0), (val, "#d62728", "val loss", 16)):
        if not series:
            continue
        pts = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in series)
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>')
        if len(series) < 50:
            out += [f'<circle cx="{sx(s):.1f}" cy="{sy(v):.1f}" r="3" fill="{color}"/>' for s, v in series]
        out.append(f'<text x="{w - right - 100}" y="{top + 10 + dy}" fill="{color}">{name}</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
