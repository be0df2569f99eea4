"""The Triton Python-backend model of ``trtkit serve --backend stub``: one TrtRunner inside each backend stub process.

:mod:`trtkit.serve.stub` copies this file into a generated model repository as ``<model>/1/model.py``; Triton's
Python backend starts one stub process per model instance, and the stub runs :class:`TritonPythonModel` there. Each
instance loads the engine named by the model's ``engine`` parameter into one
:class:`~trtkit.runtime.runner.TrtRunner` on its GPU (``devices``: the GPU of each instance, in instance order). The
dynamic batcher's requests reach :meth:`TritonPythonModel.execute` as one list; their inputs are read in place from
Triton's shared memory, joined into the runner's pinned input buffers (:func:`trtkit.serve.batching.run_requests`) and
each request gets its rows of the outputs back. Requests and answers go between Triton and the stub only, with no hop
to another process.

``TRTKIT_SERVE_STUB_PRELUDE`` (environment), when set, names a Python file each stub runs before it loads the engine
(tests put the fake TensorRT and fake CUDA in place there).

``TRTKIT_SERVE_STUB_NULL_MODEL=1`` (environment) is a diagnostic, not a way to serve: the stubs load no engine and
answer every request with zeros of the outputs' shapes and types (from the model's config), so load against it
measures what Triton, the Python backend and the clients can carry with no runner in the way
(``benchmarks/serve_h200.py``'s ``model=null`` setting).
"""

from __future__ import annotations

import os
import re
import runpy

PRELUDE_ENV = "TRTKIT_SERVE_STUB_PRELUDE"
NULL_MODEL_ENV = "TRTKIT_SERVE_STUB_NULL_MODEL"
# Triton data types of the config -> numpy dtype names, for the null model's zeros
_NUMPY = {
    "TYPE_FP32": "float32",
    "TYPE_FP16": "float16",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_INT8": "int8",
    "TYPE_UINT8": "uint8",
    "TYPE_BOOL": "bool",
}
# instance group names: one group per GPU, so an instance's name says its GPU (``trtkit_gpu1_0``: GPU 1, instance 0)
GROUP_PREFIX = "trtkit_gpu"
_INSTANCE = re.compile(rf"{GROUP_PREFIX}(\d+)_")


def instance_device(instance_name: str) -> int:
    """The GPU of the model instance Triton named ``instance_name`` (its group is ``trtkit_gpu<N>``).

    Raises:
        ServeError: the name is not one of the generated repository's.
    """
    from trtkit.errors import ServeError

    match = _INSTANCE.search(instance_name)
    if match is None:
        raise ServeError(
            f"Model instance '{instance_name}' is not in an instance group named {GROUP_PREFIX}<GPU>; serve the "
            "model from the repository trtkit.serve.stub.write_repository writes"
        )
    return int(match.group(1))


class TritonPythonModel:
    """What Triton's Python backend calls: ``initialize`` once per instance, ``execute`` per batch, ``finalize``."""

    def initialize(self, args: dict) -> None:
        import json

        prelude = os.environ.get(PRELUDE_ENV)
        if prelude:
            runpy.run_path(prelude, run_name="trtkit_stub_prelude")
        import triton_python_backend_utils as pb_utils

        from trtkit.runtime.cuda import Cuda
        from trtkit.runtime.runner import TrtRunner

        self._pb = pb_utils
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self._batched = int(config.get("max_batch_size", 0)) > 0
        self._inputs = [t["name"] for t in config["input"]]
        self._device = instance_device(args["model_instance_name"])
        self._null: dict | None = null_outputs(config) if os.environ.get(NULL_MODEL_ENV) == "1" else None
        if self._null is not None:
            return
        self._cuda = Cuda()
        self._cuda.set_device(self._device)
        self._runner = TrtRunner(params["engine"], cuda_graph=params.get("cuda_graph") == "1", cuda=self._cuda)
        self._runner.activate()

    def execute(self, requests: list) -> list:
        from trtkit.errors import TrtkitError
        from trtkit.serve.batching import run_requests

        pb = self._pb
        if self._null is not None:
            return self._null_answers(requests, self._null)
        feeds = [{name: pb.get_input_tensor_by_name(req, name).as_numpy() for name in self._inputs} for req in requests]
        try:
            self._cuda.set_device(self._device)
            outputs = run_requests(self._runner, feeds, self._batched)
        except TrtkitError as exc:  # every request of the batch is answered with the reason; the model keeps serving
            error = pb.TritonError(f"{type(exc).__name__}: {exc}")
            return [pb.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        return [
            pb.InferenceResponse(output_tensors=[pb.Tensor(name, value) for name, value in out.items()])
            for out in outputs
        ]

    def _null_answers(self, requests: list, zeros_of: dict) -> list:
        """The null model's answers: each request's rows of zeros (its first input's batch size), no runner."""
        pb, first = self._pb, self._inputs[0]
        answers = []
        for req in requests:
            rows = pb.get_input_tensor_by_name(req, first).as_numpy().shape[0] if self._batched else None
            tensors = [pb.Tensor(name, zeros[:rows] if self._batched else zeros) for name, zeros in zeros_of.items()]
            answers.append(pb.InferenceResponse(output_tensors=tensors))
        return answers

    def finalize(self) -> None:
        runner = getattr(self, "_runner", None)
        if runner is not None:
            del self._runner
            self._cuda.set_device(self._device)
            runner.close()


def null_outputs(config: dict) -> dict:
    """``{output name: zeros}`` for the null model: each output of the model's config (Triton's JSON form) at its
    dims, with ``max_batch_size`` rows in front when the model is batched (requests get views of their rows).

    Raises:
        ServeError: an output has a dynamic dimension or a type the null model cannot make.
    """
    import numpy as np

    from trtkit.errors import ServeError

    rows = int(config.get("max_batch_size", 0))
    out = {}
    for spec in config["output"]:
        dims = [int(d) for d in spec["dims"]]
        dtype = _NUMPY.get(spec["data_type"])
        if dtype is None or any(d < 0 for d in dims):
            raise ServeError(
                f"Output '{spec['name']}' ({spec['data_type']}, dims {dims}): the null model makes zeros only at "
                f"fixed dims, of {', '.join(_NUMPY)}"
            )
        out[spec["name"]] = np.zeros([rows, *dims] if rows > 0 else dims, dtype=dtype)
    return out
