"""Engine bytes in, outputs out: CUDA helpers, buffers, the runner, CUDA graphs.

from trtkit.runtime import TrtRunner
with TrtRunner("model.engine") as runner:
    outputs = runner.infer({"images": x})
"""

from trtkit.runtime.buffers import DeviceArray
from trtkit.runtime.engine import TensorSpec, io_specs, load_engine
from trtkit.runtime.pool import RunnerPool
from trtkit.runtime.runner import InferHandle, RunnerStats, TrtRunner

__all__ = [
    "DeviceArray",
    "InferHandle",
    "RunnerPool",
    "RunnerStats",
    "TensorSpec",
    "TrtRunner",
    "io_specs",
    "load_engine",
]
