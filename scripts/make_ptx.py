"""Compile the CUDA kernels trtkit ships to PTX: calibrators/kernels/histogram.cu (GPU calibration histograms) and
trtkit/runtime/kernels/letterbox.cu (the letterbox on the GPU), each to the ``.ptx`` beside it.

Each PTX is made for compute_60 and labelled PTX ISA 7.0 (CUDA 11.0), so any driver from R450 on can JIT it for its
GPU (Pascal and newer); the kernels use nothing newer than that ISA. The first line records the sha256 of the source,
and tests check that it matches, so an edited kernel without a new PTX fails the tests.

Needs NVRTC 12 (no GPU): ``pip install --target /tmp/nvrtc nvidia-cuda-nvrtc-cu12`` then
``python scripts/make_ptx.py --nvrtc /tmp/nvrtc/nvidia/cuda_nvrtc/lib/libnvrtc.so.12``.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (ROOT / "calibrators" / "kernels" / "histogram.cu", ROOT / "trtkit" / "runtime" / "kernels" / "letterbox.cu")
ISA = "7.0"
ARCH = "compute_60"


def compile_ptx(lib: ctypes.CDLL, source: str, name: str) -> str:
    prog = ctypes.c_void_p()
    err = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if err:
        raise RuntimeError(f"nvrtcCreateProgram failed ({err})")
    opts = [f"--gpu-architecture={ARCH}".encode(), b"--std=c++14"]
    err = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if err:
        raise RuntimeError(f"NVRTC could not compile {name}:\n{log.value.decode()}")
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, ptx)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvrtc", default="libnvrtc.so.12", help="path of libnvrtc.so.12")
    args = parser.parse_args(argv)
    try:
        lib = ctypes.CDLL(args.nvrtc)
    except OSError as exc:
        print(f"cannot load NVRTC ({exc}); see this script's docstring for how to get it", file=sys.stderr)
        return 1
    for path in SOURCES:
        source = path.read_text()
        ptx = compile_ptx(lib, source, path.name)
        ptx, n = re.subn(r"^\.version \d+\.\d+$", f".version {ISA}", ptx, count=1, flags=re.M)
        if n != 1:
            print(f"the PTX of {path.name} has no .version line", file=sys.stderr)
            return 1
        digest = hashlib.sha256(source.encode()).hexdigest()
        target = path.with_suffix(".ptx")
        target.write_text(f"// source sha256 {digest} (made by scripts/make_ptx.py; do not edit)\n{ptx}")
        print(f"wrote {target.relative_to(ROOT)} ({len(ptx)} characters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
