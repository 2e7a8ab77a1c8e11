#!/usr/bin/env python3
"""Orders a node's CUDA library folders for the GPU check
(scripts/gpu-check.sh): for each library the build needs, cuBLAS first,
the folder holding its newest release comes first.

    gpu_check_cuda_libs.py CUDA_LIBS_TXT DIR...

CUDA_LIBS_TXT is a bundle's cuda-libs.txt (soname and the version the
build was compiled against, one a line). Each library's release is asked
of the library itself (cudaRuntimeGetVersion, cublasGetProperty,
cublasLtGetVersion, cudnnGetVersion, ncclGetVersion through ctypes), since
the wheels' file names (libcublasLt.so.13) carry no version. Prints the
ordered folders, colon-separated, on the first line, then one line per
library and folder: `soname version folder` (`?` where the library would
not load or answer), with `(older than the build's X)` where its release
is older than the one the build was compiled against. Standard library
only.
"""

import ctypes
import os
import sys


def _int_out(fn):
    value = ctypes.c_int(0)
    if fn(ctypes.byref(value)) != 0:
        return None
    return value.value


def release(path, soname):
    """The library's (major, minor, patch), or None."""
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    try:
        if soname.startswith("libcudart."):
            v = _int_out(lib.cudaRuntimeGetVersion)
            return None if v is None else (v // 1000, v % 1000 // 10, 0)
        if soname.startswith("libcublasLt."):
            lib.cublasLtGetVersion.restype = ctypes.c_size_t
            v = lib.cublasLtGetVersion()
            return (v // 10000, v // 100 % 100, v % 100)
        if soname.startswith("libcublas."):
            parts = []
            for kind in range(3):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
                value = ctypes.c_int(0)
                if lib.cublasGetProperty(kind, ctypes.byref(value)) != 0:
                    return None
                parts.append(value.value)
            return tuple(parts)
        if soname.startswith("libcudnn."):
            lib.cudnnGetVersion.restype = ctypes.c_size_t
            v = lib.cudnnGetVersion()
            return (v // 10000, v // 100 % 100, v % 100)
        if soname.startswith("libnccl."):
            v = _int_out(lib.ncclGetVersion)
            return None if v is None else (v // 10000, v // 100 % 100,
                                           v % 100)
    except AttributeError:
        return None
    return None


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    built = {}
    with open(sys.argv[1]) as f:
        for line in f:
            if line.strip():
                name, _, version = line.partition(" ")
                built[name] = version.strip()
    sonames = list(built)
    dirs = []
    for d in sys.argv[2:]:
        if d and d not in dirs:
            dirs.append(d)
    # A folder that comes first serves every library it holds, so the
    # libraries whose release matters most choose first: cuBLAS(Lt), whose
    # kernels are the run's speed, then cuDNN, NCCL, and the runtime.
    priority = ("libcublasLt.", "libcublas.", "libcudnn.", "libnccl.",
                "libcudart.")
    sonames.sort(key=lambda s: next(
        (i for i, p in enumerate(priority) if s.startswith(p)), len(priority)))
    first, lines = [], []
    for soname in sonames:
        best, best_v = None, None
        for d in dirs:
            path = os.path.join(d, soname)
            if not os.path.exists(path):
                continue
            v = release(path, soname)
            line = f"{soname} {'.'.join(map(str, v)) if v else '?'} {d}"
            want = tuple(int(x) for x in built[soname].split(".")[:3]
                         if x.isdigit())
            if v is not None and want and v < want:
                line += f" (older than the build's {built[soname]})"
            lines.append(line)
            if best is None or (v is not None and (best_v is None or
                                                   v > best_v)):
                best, best_v = d, v
        if best is not None and best not in first:
            first.append(best)
    print(":".join(first + [d for d in dirs if d not in first]))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
