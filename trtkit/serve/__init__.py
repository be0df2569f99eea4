"""Serving engines on a real NVIDIA Triton Inference Server, from Python (``trtkit serve``).

    settings = ServeSettings(instances=2, max_batch=32, max_queue_delay_us=100, gpus=(0, 1))
    with Server(["resnet50.engine"], settings) as server:     # Triton ready; models loaded, or named where not
        server.wait()                                         # until SIGTERM/SIGINT or stop(); drains, then exits

pytriton (``pip install "trtkit[serve]"``) ships the ``tritonserver`` binary and its Python backend. Each model instance
is a :class:`~trtkit.runtime.runner.TrtRunner` inside Triton's Python backend (:mod:`trtkit.serve.python_backend`, the
default), or the engine on Triton's TensorRT backend (:mod:`trtkit.serve.tensorrt_backend`), with Triton's dynamic
batcher in front.
"""

from trtkit.serve.server import LoadFailure, Server, ServeSettings

__all__ = ["LoadFailure", "ServeSettings", "Server"]
