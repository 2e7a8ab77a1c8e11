#!/usr/bin/env python3
"""scripts/gpu_check_report.py judges the GPU goals from made-up results:
an MFU under its floor, a run under 1.3x PyTorch's or 1.15x llm.c's
tokens/s, an attention path slower than 1.3x SDPA, a path with wrong
results, a skipped PyTorch or llm.c and a failed test section must each
show as such, and the exit code must follow.

    gpu_check_report_test.py SOURCE_DIR
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

REPORT = os.path.join(sys.argv.pop(1), "scripts", "gpu_check_report.py")
TORCH_124 = "gpt2-124m tokens/s >= 1.3x compiled PyTorch"
TORCH_350 = "gpt2-350m tokens/s >= 1.3x compiled PyTorch"
LLMC_124 = "gpt2-124m tokens/s >= 1.15x llm.c"
LLMC_350 = "gpt2-350m tokens/s >= 1.15x llm.c"


def bench(preset, mfu, tokens_per_s):
    return {"model": {"parameters": 124e6}, "tokens_per_step": 32768,
            "median": {"ms": 100.0, "tokens_per_s": tokens_per_s,
                       "model_tflops": 989 * mfu, "mfu": mfu},
            "peak_memory_bytes": 2**30, "preset": preset}


def path(name, fwd, both, diff=1e-3, finite=True):
    return {"path": name, "forward_ms": fwd, "forward_backward_ms": both,
            "forward_tflops": 1.0, "forward_backward_tflops": 1.0,
            "out_diff_vs_first": 0.0 if name == "simt" else diff,
            "grad_diff_vs_first": 0.0, "same_as_first": False,
            "finite": finite}


def sdpa_backend(name, fwd, both):
    return {"backend": name, "forward_ms": fwd, "forward_backward_ms": both,
            "forward_tflops": 1.0, "forward_backward_tflops": 1.0}


class ReportTest(unittest.TestCase):
    def run_report(self, files, sections):
        with tempfile.TemporaryDirectory() as d:
            for name, content in files.items():
                with open(os.path.join(d, name), "w") as f:
                    json.dump(content, f)
            with open(os.path.join(d, "sections.tsv"), "w") as f:
                for name, status, secs in sections:
                    f.write(f"{name}\t{status}\t{secs}\n")
            p = subprocess.run(
                [sys.executable, REPORT, d, "--presets=gpt2-124m gpt2-350m"],
                capture_output=True, text=True)
        return p.returncode, p.stdout

    def verdict(self, out, goal):
        rows = [l for l in out.splitlines() if l.startswith(f"| {goal}")]
        self.assertEqual(len(rows), 1, f"{goal} not in\n{out}")
        return rows[0].split("|")[2].strip()

    def shapes(self, mma_fwd, mma_both, mma_diff=1e-3):
        label = "gpt2-124m (8×1024×12×64)"
        ours = {"shapes": [{"name": "gpt2-124m", "label": label, "paths": [
            path("simt", 10.0, 40.0),
            path("mma", mma_fwd, mma_both, diff=mma_diff)]}]}
        sdpa = {"shapes": [{"label": label, "backends": [
            sdpa_backend("default", 1.0, 4.0),
            sdpa_backend("flash", 1.1, 4.2)]}]}
        return {"attention.json": ours, "sdpa.json": sdpa}

    def torch(self, tokens_per_s):
        return {"tokens_per_s": tokens_per_s, "mfu": 0.4}

    def llmc(self, tokens_per_s):
        return {"depth": 12, "micro_batch_size": 64, "seq_len": 1024,
                "tokens_per_step": 65536, "ms": 100.0,
                "tokens_per_s": tokens_per_s}

    def met(self):
        return {"bench-gpt2-124m.json": bench("gpt2-124m", 0.46, 1000),
                "bench-gpt2-350m.json": bench("gpt2-350m", 0.51, 500),
                "torch-gpt2-124m.json": self.torch(700),
                "torch-gpt2-350m.json": self.torch(380),
                "llmc-gpt2-124m.json": self.llmc(850),
                "llmc-gpt2-350m.json": self.llmc(430),
                **self.shapes(1.2, 5.0)}

    def test_all_goals_met(self):
        rc, out = self.run_report(self.met(), [("tests", "ok", 300)])
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.verdict(out, "MFU of gpt2-124m"), "met")
        self.assertEqual(self.verdict(out, "MFU of gpt2-350m"), "met")
        self.assertEqual(self.verdict(out, TORCH_350), "met")
        self.assertEqual(self.verdict(out, LLMC_124), "met")
        self.assertEqual(self.verdict(out, "best attention"), "met")
        self.assertIn("| 1.43x |", out)  # 1000 / 700 tokens/s
        self.assertIn("| 850 (64) | 1.18x |", out)  # llm.c's and the ratio

    def test_the_peers_ratios_are_goals_of_their_own(self):
        files = self.met()
        files["torch-gpt2-124m.json"] = self.torch(800)  # 1.25x < 1.3x
        files["llmc-gpt2-350m.json"] = self.llmc(450)  # 1.11x < 1.15x
        files["llmc-gpt2-124m.json"] = {"skipped": "no llm.c build"}
        rc, out = self.run_report(files, [("tests", "ok", 300)])
        self.assertEqual(rc, 1, out)
        self.assertEqual(self.verdict(out, TORCH_124), "MISSED")
        self.assertEqual(self.verdict(out, TORCH_350), "met")
        self.assertEqual(self.verdict(out, LLMC_124), "n/a")
        self.assertEqual(self.verdict(out, LLMC_350), "MISSED")

    def test_each_miss_shows_and_fails(self):
        files = {"bench-gpt2-124m.json": bench("gpt2-124m", 0.44, 800),
                 "bench-gpt2-350m.json": bench("gpt2-350m", 0.51, 500),
                 "torch-gpt2-124m.json": self.torch(900),
                 "torch-gpt2-350m.json": {"skipped": "no PyTorch"},
                 **self.shapes(1.2, 5.3)}  # 5.3 / 4.0 > 1.3
        rc, out = self.run_report(
            files, [("tests", "FAILED", 300), ("bench:gpt2-124m", "ok", 1000)])
        self.assertEqual(rc, 1, out)
        self.assertEqual(self.verdict(out, "MFU of gpt2-124m"), "MISSED")
        self.assertEqual(self.verdict(out, "MFU of gpt2-350m"), "met")
        self.assertEqual(self.verdict(out, TORCH_124), "MISSED")
        self.assertEqual(self.verdict(out, TORCH_350), "n/a")
        self.assertEqual(self.verdict(out, LLMC_350), "NOT MEASURED")
        self.assertEqual(self.verdict(out, "best attention"), "MISSED")
        self.assertEqual(self.verdict(out, "every GPU test"), "MISSED")
        self.assertEqual(self.verdict(out, "the check within"), "MISSED")

    def test_the_llama_sections_are_goals_where_they_ran(self):
        files = self.met()
        rc, out = self.run_report(files, [("tests", "ok", 300),
                                          ("llama", "ok", 10),
                                          ("generate", "FAILED", 5)])
        self.assertEqual(rc, 1, out)
        self.assertEqual(self.verdict(out, "converted HF Llama"), "met")
        self.assertEqual(self.verdict(out, "greedy tokens"), "MISSED")
        rc, out = self.run_report(files, [("tests", "ok", 300)])
        self.assertEqual(rc, 0, out)
        self.assertNotIn("greedy tokens", out)

    def test_a_fast_path_with_wrong_results_does_not_count(self):
        files = self.shapes(0.5, 2.0, mma_diff=0.5)
        rc, out = self.run_report(files, [("tests", "ok", 10)])
        self.assertEqual(self.verdict(out, "best attention"), "MISSED")
        self.assertIn("trellis mma (WRONG RESULTS)", out)

    def test_an_eager_fallback_does_not_meet_the_compiled_goal(self):
        files = {"bench-gpt2-124m.json": bench("gpt2-124m", 0.46, 1000),
                 "torch-gpt2-124m.json": dict(self.torch(500),
                                              compiled=False)}
        rc, out = self.run_report(files, [("tests", "ok", 10)])
        self.assertEqual(self.verdict(out, TORCH_124), "NOT MEASURED")
        self.assertIn("500 (eager)", out)

    def test_missing_results_are_not_measured(self):
        rc, out = self.run_report({}, [("tests", "ok", 10)])
        self.assertEqual(rc, 1, out)
        self.assertEqual(self.verdict(out, "MFU of gpt2-350m"),
                         "NOT MEASURED")
        self.assertEqual(self.verdict(out, "best attention"), "NOT MEASURED")


if __name__ == "__main__":
    unittest.main()
