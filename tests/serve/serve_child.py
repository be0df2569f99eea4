"""``trtkit serve`` in a child process over the fake TensorRT and fake CUDA: ``python serve_child.py ARGS...``.

The CPU tier's stand-in for a GPU host. ``TRTKIT_FAKE_GPUS`` sets how many fake GPUs there are (default 1);
``TRTKIT_FAKE_INFER_S`` makes every runner call take that long (requests in flight while the server is stopped). On
exit it prints one line, ``FAKE_CUDA {json}``: device memory still allocated and the devices allocations were made on.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list) -> int:
    from tests.serve.stub_prelude import install_fakes

    # trtkit serve --backend python: each Triton Python backend stub puts the same fakes in place
    os.environ.setdefault("TRTKIT_SERVE_STUB_PRELUDE", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                    "stub_prelude.py"))
    rt = install_fakes()
    from trtkit.cli.main import main as trtkit_main

    code = trtkit_main(argv)
    devices = sorted(set(rt.allocation_device.values()))
    print("FAKE_CUDA " + json.dumps({"live": rt.live_allocations(), "devices": devices,
                                     "set_device_calls": rt.calls["cudaSetDevice"]}), flush=True)
    return code


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.exit(main(sys.argv[1:]))
