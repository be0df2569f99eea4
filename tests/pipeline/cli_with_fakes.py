"""Run the ``trtkit`` command with the fake TensorRT and fake CUDA installed (for tests that need a real process,
e.g. to send it SIGINT): ``python cli_with_fakes.py run ENGINE --video ...``.

``TRTKIT_TEST_PRE_DELAY_S``: sleep this long in every preprocessing call, so a run lasts long enough to interrupt;
``TRTKIT_TEST_STARTED``: a file created when the first frame is preprocessed (the pipeline is running).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def install_fakes() -> None:
    import cuda.bindings

    from tests.fakes.fake_cuda import FakeCudart
    from tests.fakes.fake_trt import make_fake_trt

    rt = FakeCudart()
    sys.modules["tensorrt"] = make_fake_trt("8.6.0")
    sys.modules["cuda.bindings.runtime"] = rt
    cuda.bindings.runtime = rt


def slow_down_preprocessing(seconds: float, started: str | None) -> None:
    """Both preprocessings: the CPU's (``ImagePreprocess.into``, which ``__call__`` goes through too) and the GPU
    letterbox's (``DeviceFramePreprocess.letterbox_into``)."""
    from trtkit.pipeline.device_frames import DeviceFramePreprocess
    from trtkit.pipeline.preprocess import ImagePreprocess

    def slowed(method):
        def slow(self, image, out):
            if started and not os.path.exists(started):
                Path(started).touch()
            time.sleep(seconds)
            return method(self, image, out)

        return slow

    ImagePreprocess.into = slowed(ImagePreprocess.into)
    DeviceFramePreprocess.letterbox_into = slowed(DeviceFramePreprocess.letterbox_into)


if __name__ == "__main__":
    install_fakes()
    delay = float(os.environ.get("TRTKIT_TEST_PRE_DELAY_S", "0"))
    if delay:
        slow_down_preprocessing(delay, os.environ.get("TRTKIT_TEST_STARTED"))
    from trtkit.cli.main import main

    sys.exit(main(sys.argv[1:]))
