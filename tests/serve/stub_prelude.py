"""Run by each Triton Python backend stub of ``trtkit serve --backend python`` in the CPU tests, before the engine is
loaded (``TRTKIT_SERVE_STUB_PRELUDE``): the fake TensorRT and fake CUDA in place of the real ones, as
``serve_child.py`` puts them in the serving process. ``TRTKIT_FAKE_GPUS`` and ``TRTKIT_FAKE_INFER_S`` as there;
with ``TRTKIT_FAKE_STUB_FAIL`` naming an engine file's stem, the stubs of that engine fail to make their runner; with
``TRTKIT_FAKE_REPORT`` set, each stub appends one JSON line to that file when it exits: device memory still
allocated and the devices allocations were made on."""

from __future__ import annotations

import atexit
import json
import os
import sys


def install_fakes():
    """The fake TensorRT and fake CUDA (``TRTKIT_FAKE_GPUS`` devices) as ``tensorrt`` and ``cuda.bindings.runtime``,
    and ``TRTKIT_FAKE_INFER_S`` added to every runner call; returns the fake CUDA runtime."""
    import cuda.bindings

    from tests.fakes.fake_cuda import FakeCudart
    from tests.fakes.fake_trt import make_fake_trt

    rt = FakeCudart(devices=int(os.environ.get("TRTKIT_FAKE_GPUS", "1")))
    sys.modules["tensorrt"] = make_fake_trt("8.6.0")
    sys.modules["cuda.bindings.runtime"] = rt
    cuda.bindings.runtime = rt
    delay = float(os.environ.get("TRTKIT_FAKE_INFER_S", "0"))
    if delay:
        import time

        from trtkit.runtime.runner import TrtRunner

        infer = TrtRunner.infer

        def slow_infer(self, feed, **kwargs):
            time.sleep(delay)
            return infer(self, feed, **kwargs)

        TrtRunner.infer = slow_infer
    return rt


def _in_a_stub() -> None:
    rt = install_fakes()
    failing = os.environ.get("TRTKIT_FAKE_STUB_FAIL")  # the engine file stem whose runners cannot be made
    if failing:
        from pathlib import Path

        from trtkit.errors import EngineError
        from trtkit.runtime.runner import TrtRunner

        make = TrtRunner.__init__

        def failing_init(self, engine, *args, **kwargs):
            if Path(str(engine)).stem == failing:
                raise EngineError(f"fake stub failure for {failing}")
            make(self, engine, *args, **kwargs)

        TrtRunner.__init__ = failing_init
    report = os.environ.get("TRTKIT_FAKE_REPORT")
    if report:
        def _report():
            with open(report, "a") as f:
                f.write(json.dumps({"live": rt.live_allocations(),
                                    "devices": sorted(set(rt.allocation_device.values()))}) + "\n")

        atexit.register(_report)


if __name__ == "trtkit_stub_prelude":  # run by trtkit.serve.python_backend_model (runpy), not imported
    _in_a_stub()
