"""Shared pieces of the PyTorch reference scripts (gpt2_bench.py,
sdpa_bench.py, hf_llama_loss.py, hf_generate.py): the clean skip when
PyTorch or its GPU is missing, the timing of a callable with CUDA events,
the JSON result file, and the reading of a Hugging Face model directory
(config.json and its safetensors) into torch tensors.

The scripts write one JSON object to --json. A run that cannot measure
(no PyTorch, no CUDA device, a PyTorch too old for what is timed) writes
{"skipped": "<why>"} and exits 0, so the GPU check reports a note instead
of a failure (the tests, which need PyTorch, fail on it instead).
"""

import json
import os
import statistics
import struct
import sys
import time


def write_json(path, result):
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


def skip(json_path, why):
    """Reports a measurement that cannot run here, then exits 0."""
    print(f"skipped: {why}")
    write_json(json_path, {"skipped": why})
    sys.exit(0)


def import_torch(json_path, device, need_sdpa=True):
    """Returns the torch module, or skips when it (or its GPU, or with
    need_sdpa its scaled_dot_product_attention) is missing."""
    try:
        import torch  # noqa: PLC0415 (the import is what may fail)
    except ImportError as e:
        skip(json_path, f"no PyTorch in {sys.executable} ({e})")
    if device == "cuda" and not torch.cuda.is_available():
        skip(json_path, f"PyTorch {torch.__version__} sees no CUDA device")
    if need_sdpa and not hasattr(torch.nn.functional,
                                 "scaled_dot_product_attention"):
        skip(json_path, f"PyTorch {torch.__version__} has no "
             "scaled_dot_product_attention (needs 2.0 or newer)")
    return torch


def add_forward_args(ap):
    """The options of the scripts that run a model's forward in PyTorch."""
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float64",
                    choices=["float64", "float32"])
    ap.add_argument("--json", default="")


def environment(torch, device):
    """What ran the measurement, for the report."""
    env = {"torch": torch.__version__, "python": sys.version.split()[0],
           "device": device}
    if device == "cuda":
        env["device_name"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
    else:
        env["device_name"] = "cpu"
    return env


def time_ms(torch, device, fn, warmup, reps):
    """Milliseconds of each of `reps` calls of fn after `warmup` calls:
    CUDA events around each call on the GPU, the wall clock on the CPU."""
    for _ in range(warmup):
        fn()
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        for _ in range(reps):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return times


def median(values):
    return statistics.median(values)


def parse_shape(text):
    """'BxTxHxD' -> dict(B, T, H, D)."""
    parts = text.split("x")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"shape '{text}' is not BxTxHxD with positive sizes")
    b, t, h, d = (int(p) for p in parts)
    return {"name": "custom", "B": b, "T": t, "H": h, "D": d}


def read_safetensors(torch, path):
    """{name: tensor} of one safetensors file (F32, F16, BF16)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    dtypes = {"F32": torch.float32, "F16": torch.float16,
              "BF16": torch.bfloat16}
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        t = torch.frombuffer(data[begin:end], dtype=dtypes[entry["dtype"]])
        out[name] = t.reshape(entry["shape"]).clone()
    return out


def read_model(torch, model_dir):
    """The tensors of a Hugging Face directory: model.safetensors, or the
    shards that model.safetensors.index.json names."""
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(torch, single)
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    tensors = {}
    for file in sorted(set(index["weight_map"].values())):
        tensors.update(read_safetensors(torch, os.path.join(model_dir, file)))
    return tensors


def read_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)
