#!/usr/bin/env python3
"""Reads trellis-train's TensorBoard event file back with protobuf itself.

Two ranks (dp 2) train a tiny model with --tensorboard_dir and
--metrics_file; rank 1 gets a NaN gradient at step 4 (a test hook), so one
step is skipped. Then, independently of trellis's writer:

- exactly one event file exists (only rank 0 writes);
- every record's framing holds: both masked CRC-32Cs (computed here
  bit by bit) match;
- the first record is the file-version event "brain.Event:2";
- every record parses as tensorflow.Event (tests/tools/tensorboard_event.proto,
  compiled now with protoc) and serializes back to the very same bytes;
- each scalar record equals the matching line of the metrics file, as the
  float32 a simple_value holds, skipped step and validation loss included.

Usage: tensorboard_events_test.py BIN_DIR SOURCE_DIR MPIRUN [MPIRUN ARGS...]
Exit 77 (skipped) when protoc or python3-protobuf is missing
(scripts/install-deps.sh installs both).
"""

import glob
import importlib
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), bit by bit: no table, nothing shared with C++."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path):
    """Yields each TFRecord's data, checking both CRCs."""
    with open(path, "rb") as f:
        blob = f.read()
    pos = 0
    while pos < len(blob):
        assert len(blob) - pos >= 12, f"truncated record header at byte {pos}"
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        assert header_crc == masked(header), f"length CRC wrong at byte {pos}"
        data = blob[pos + 12:pos + 12 + length]
        assert len(data) == length, f"truncated record at byte {pos}"
        (data_crc,) = struct.unpack(
            "<I", blob[pos + 12 + length:pos + 16 + length])
        assert data_crc == masked(data), f"data CRC wrong at byte {pos}"
        pos += 16 + length
        yield data


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same(a, b):
    """a (from the event) equals b (from JSON, None for NaN) as a float32."""
    if b is None:
        return math.isnan(a)
    return a == f32(b)


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(cmd)}\n"
                 f"{result.stdout}\n{result.stderr}")
    return result


def main():
    bin_dir, source_dir, mpirun = sys.argv[1], sys.argv[2], sys.argv[3:]
    protoc = shutil.which("protoc")
    try:
        importlib.import_module("google.protobuf")
    except ImportError:
        protoc = None
    if protoc is None:
        print("[  SKIPPED ] needs protoc and python3-protobuf "
              "(scripts/install-deps.sh)")
        return SKIP
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value

    work = tempfile.mkdtemp(prefix="trellis_tensorboard_")
    try:
        run([protoc, f"--python_out={work}",
             f"-I{source_dir}/tests/tools", "tensorboard_event.proto"])
        sys.path.insert(0, work)
        event_pb2 = importlib.import_module("tensorboard_event_pb2")

        text = os.path.join(work, "text.txt")
        with open(text, "w") as f:
            for i in range(400):
                f.write(" ".join(f"w{(i * 7 + j * 13) % 97}"
                                 for j in range(12)) + "\n")
        data = os.path.join(work, "tokens.h5")
        run([f"{bin_dir}/trellis-preprocess", f"--input={text}",
             f"--output={data}", "--split=line", "--threads=1"])
        tb_dir = os.path.join(work, "tb")
        metrics = os.path.join(work, "metrics.jsonl")
        env = dict(os.environ, TRELLIS_TEST_INJECT_NAN="4:1",
                   OPENBLAS_NUM_THREADS="1")
        started = time.time()
        run(mpirun + ["-np", "2", f"{bin_dir}/trellis-train",
                      f"--data={data}", "--n_layer=1", "--n_head=2",
                      "--d_model=16", "--seq_len=16", "--micro_batch_size=2",
                      "--global_batch_size=8", "--steps=6",
                      "--warmup_steps=1", "--eval_every=3",
                      "--eval_windows=4", "--val_fraction=0.1", "--dp=2",
                      f"--metrics_file={metrics}",
                      f"--tensorboard_dir={tb_dir}"], env=env)

        files = glob.glob(os.path.join(tb_dir, "*"))
        assert len(files) == 1, f"want one event file (rank 0's): {files}"
        assert "tfevents" in os.path.basename(files[0]), files
        records = list(read_records(files[0]))
        events = []
        for data in records:
            event = event_pb2.Event()
            event.ParseFromString(data)
            assert event.SerializeToString() == data, "bytes beyond the proto"
            events.append(event)
        assert events[0].file_version == "brain.Event:2", events[0]
        assert all(not e.HasField("file_version") for e in events[1:])

        with open(metrics) as f:
            lines = [json.loads(line) for line in f]
        scalars = events[1:]
        assert len(scalars) == len(lines) == 7, (len(scalars), len(lines))
        previous = 0
        for event, line in zip(scalars, lines):
            assert started - 5 < event.wall_time < time.time() + 5
            assert event.wall_time >= previous
            previous = event.wall_time
            assert event.step == line["step"], (event.step, line)
            values = {v.tag: v.simple_value for v in event.summary.value}
            assert len(values) == len(event.summary.value), "a tag twice"
            want = {
                "train/loss": line["loss"],
                "train/lr": line["lr"],
                "train/grad_norm": line["grad_norm"],
                "perf/tokens_per_s": line["tokens_per_s"],
                "perf/ms": line["ms"],
                "perf/model_tflops": line["model_tflops"],
                "pipeline/bubble": line["bubble"],
                "pipeline/bubble_theory": line["bubble_theory"],
                "perf/dp_wait_ms": line["dp_wait_ms"],
                "memory/peak_bytes": line["memory_peak_bytes"],
                "memory/planned_bytes": line["memory_planned_bytes"],
                "health/skipped_steps": line["skipped_steps"],
                "health/skipped": 1.0 if "skipped" in line else 0.0,
            }
            if line["mfu"] > 0:
                want["perf/mfu"] = line["mfu"]
            if "val_loss" in line:
                want["val/loss"] = line["val_loss"]
            for source, loss in line.get("val_loss_by_source", {}).items():
                want[f"val/loss_by_source/{source}"] = loss
            if "slowest_over_median" in line:
                want["health/slowest_over_median"] = line[
                    "slowest_over_median"]
            # The arena holds the plan's tensors: its peak is real and
            # within the plan's total (rounding of blocks aside).
            assert 0 < line["memory_peak_bytes"] <= (
                1.05 * line["memory_planned_bytes"]), line
            assert set(values) == set(want), (sorted(values), sorted(want))
            for tag, value in want.items():
                assert same(values[tag], value), (event.step, tag,
                                                  values[tag], value)
        # Step 4's first attempt was skipped (rank 1's NaN), and it counts.
        skipped = [e for e, l in zip(scalars, lines) if "skipped" in l]
        assert [e.step for e in skipped] == [4], [e.step for e in skipped]
        last = {v.tag: v.simple_value for v in scalars[-1].summary.value}
        assert last["health/skipped_steps"] == 1.0
        assert "val/loss" in last and math.isfinite(last["val/loss"])
        print(f"[       OK ] {len(records)} records, every CRC and value")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
