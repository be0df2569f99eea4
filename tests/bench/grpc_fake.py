"""A real gRPC server (grpcio's) speaking Triton's inference protocol for a few made-up models, for the load clients'
tests: what a client sees of HTTP/2 (HPACK, flow control, SETTINGS, PING, GOAWAY) is grpc's own.

Models (input ``x``, output ``y``, both FP32, batch dimension first):
- ``small``: ``x`` [1, 4] -> ``y`` [1, 4], doubled;
- ``large``: ``x`` [1, 3, 256, 256] (768 KiB a request: more than HTTP/2's first flow-control window) -> ``y`` [1, 4],
  and ``big_y``, 1 MiB;
- ``slow``: as ``small`` after 0.3 s;
- ``hollow``: as ``small`` but ``y`` comes back with no bytes;
- ``picky``: every third request refused with INVALID_ARGUMENT naming ``x``.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures

import numpy as np

SHAPES = {"small": [1, 4], "large": [1, 3, 256, 256], "slow": [1, 4], "hollow": [1, 4], "picky": [1, 4]}


def _servicer_class():
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
        def __init__(self):
            self.count = 0
            self.lock = threading.Lock()
            self.last_request = None
            self.peers: set = set()  # the client connections requests came over

        def ServerLive(self, request, context):
            return service_pb2.ServerLiveResponse(live=True)

        def ServerReady(self, request, context):
            return service_pb2.ServerReadyResponse(ready=True)

        def ModelReady(self, request, context):
            return service_pb2.ModelReadyResponse(ready=request.name in SHAPES)

        def ModelMetadata(self, request, context):
            shape = SHAPES[request.name]
            outputs = [service_pb2.ModelMetadataResponse.TensorMetadata(name="y", datatype="FP32", shape=[-1, 4])]
            if request.name == "large":
                outputs.append(
                    service_pb2.ModelMetadataResponse.TensorMetadata(name="big_y", datatype="FP32", shape=[-1, 262144])
                )
            return service_pb2.ModelMetadataResponse(
                name=request.name,
                platform="fake",
                inputs=[service_pb2.ModelMetadataResponse.TensorMetadata(name="x", datatype="FP32",
                                                                          shape=[-1, *shape[1:]])],
                outputs=outputs,
            )

        def ModelConfig(self, request, context):
            from tritonclient.grpc import model_config_pb2

            return service_pb2.ModelConfigResponse(
                config=model_config_pb2.ModelConfig(name=request.name, backend="fake", max_batch_size=8)
            )

        def ModelInfer(self, request, context):
            with self.lock:
                self.count += 1
                n = self.count
                self.last_request = request
                self.peers.add(context.peer())
            name = request.model_name
            (tensor,) = request.inputs
            if list(tensor.shape) != SHAPES[name] or tensor.datatype != "FP32" or tensor.name != "x":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"unexpected shape for input 'x' for model '{name}': {list(tensor.shape)}")
            if name == "picky" and n % 3 == 0:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "input 'x' refused: every third one is")
            if name == "slow":
                time.sleep(0.3)
            data = np.frombuffer(request.raw_input_contents[0], np.float32) if request.raw_input_contents else None
            y = (np.zeros(4, np.float32) if data is None else data[:4] * 2).tobytes()
            answer = service_pb2.ModelInferResponse(model_name=name, id=request.id)
            answer.outputs.add(name="y", datatype="FP32", shape=[1, 4])
            answer.raw_output_contents.append(b"" if name == "hollow" else y)
            if name == "large":
                answer.outputs.add(name="big_y", datatype="FP32", shape=[1, 262144])
                answer.raw_output_contents.append(bytes(4 * 262144))
            return answer

    return Servicer


class FakeTriton:
    """The server on a free port of 127.0.0.1 (``address``), in this process, while in a ``with`` block."""

    def __init__(self, workers: int = 16):
        import grpc
        from tritonclient.grpc import service_pb2_grpc

        self.servicer = _servicer_class()()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(self.servicer, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"

    def __enter__(self) -> FakeTriton:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop(grace=None)
