"""The Triton Python-backend model of ``trtkit serve --backend python``: one TrtRunner in each backend stub process.

:mod:`trtkit.serve.python_backend` copies this file into a model repository as ``<model>/1/model.py``; Triton's
Python backend runs :class:`TritonPythonModel` in one stub process per instance, which loads the ``engine`` parameter
into a :class:`~trtkit.runtime.runner.TrtRunner` on its GPU (``devices``: each instance's, in order). The dynamic
batcher's requests reach :meth:`TritonPythonModel.execute` as one list; their inputs are joined into the runner's
pinned input buffers (:func:`trtkit.serve.batching.run_requests`) and each request gets its rows of the outputs.

``TRTKIT_SERVE_STUB_PRELUDE`` (environment), when set, names a Python file each stub runs before it loads the engine
(tests put the fake TensorRT and fake CUDA in place there).
"""

from __future__ import annotations

import os
import re
import runpy

PRELUDE_ENV = "TRTKIT_SERVE_STUB_PRELUDE"
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
            "model from the repository trtkit.serve.python_backend.write_repository writes"
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
        self._cuda = Cuda()
        self._cuda.set_device(self._device)
        self._runner = TrtRunner(params["engine"], cuda_graph=params.get("cuda_graph") == "1", cuda=self._cuda)
        self._runner.activate()

    def execute(self, requests: list) -> list:
        from trtkit.errors import TrtkitError
        from trtkit.serve.batching import run_requests

        pb = self._pb
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

    def finalize(self) -> None:
        runner = getattr(self, "_runner", None)
        if runner is not None:
            del self._runner
            self._cuda.set_device(self._device)
            runner.close()
