"""``trtkit bench --server``: refusals before any load, a server that does not answer, and the statistics of a level."""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest

from trtkit.bench import serving
from trtkit.cli import main as cli_main


@pytest.mark.parametrize("args, says", [
    (["bench"], "give an engine or ONNX model to benchmark, or --server URL --model NAME"),
    (["bench", "--server", "127.0.0.1:1"], "--server URL --model NAME"),
    (["bench", "--server", "127.0.0.1:1", "--model", "m", "--concurrency", "1,x"], "--concurrency '1,x'"),
    (["bench", "--server", "127.0.0.1:1", "--model", "m", "--concurrency", "0"], "levels of 1 or more"),
    (["bench", "--server", "127.0.0.1:1", "--model", "m", "--requests", "0"], "--requests must be 1 or more, not 0"),
    (["bench", "--server", "127.0.0.1:1", "--model", "m", "--batch", "0"], "--batch must be 1 or more, not 0"),
    (["bench", "--server", "127.0.0.1:1", "--model", "m", "--shared-memory", "posix"],
     "--shared-memory 'posix': give one of none, system, cuda"),
    (["bench", "--server", "127.0.0.1:1", "--model", "m", "--shared-memory", "cuda", "--cuda-device", "-1"],
     "--cuda-device must be 0 or more, not -1"),
    (["bench", "--server", "127.0.0.1:1", "--model", "m", "--procs", "0"], "--procs must be 1 or more, not 0"),
    (["bench", "--server", "127.0.0.1:1", "--model", "m", "--streaming"],
     "--streaming needs gRPC (Triton streams inference over gRPC only); use gRPC or leave --streaming off"),
])
def test_refused_before_any_load(args, says, capsys):
    assert cli_main.main(args) == 2  # usage errors
    assert says in capsys.readouterr().err


def test_no_server_answering_is_named():
    pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(serving.ServeError, match=f"No Triton server answers gRPC at 127.0.0.1:{port}"):
            serving.load_test(f"127.0.0.1:{port}", "m", serving.LoadSettings(concurrency=(1,), grpc=True,
                                                                             duration_s=1))


class _Client:
    """Answers after a fixed delay; every third request fails."""

    def __init__(self):
        self.n = 0

    async def infer(self, model, inputs):
        self.n += 1
        n = self.n
        await asyncio.sleep(0.001)
        if n % 3 == 0:
            raise RuntimeError("model says no")


def test_level_counts_failures_and_stops_at_the_request_cap():
    settings = serving.LoadSettings(concurrency=(4,), duration_s=10.0, max_requests=30, batch=2)
    result = asyncio.run(serving._level(_Client(), "m", [], 4, settings, settings.max_requests))
    assert result.requests + result.failed == 30 and result.failed == 10
    assert result.errors == ["RuntimeError: model says no"]
    assert result.ips == pytest.approx(2 * result.rps, rel=0.01) and result.p50_ms <= result.p99_ms
    assert result.wall_s < 10


class _Response:
    def __init__(self, rid: str):
        self.id = rid


class _Answer:
    def __init__(self, rid: str):
        self.rid = rid

    def get_response(self):
        return _Response(self.rid)


class _StreamClient:
    """One stream: answers its requests two at a time in the reverse order they came; request 3 is answered with an
    error (which, as in tritonclient, carries no id); with ``break_after``, the stream breaks after that many."""

    def __init__(self, break_after: int | None = None):
        self.break_after, self.seen, self.ended = break_after, [], False

    def stream_infer(self, requests):
        async def answers():
            held = []
            async for request in requests:
                self.seen.append(request["request_id"])
                if self.break_after is not None and len(self.seen) > self.break_after:
                    raise ConnectionError("stream reset by peer")
                held.append(request["request_id"])
                if len(held) == 2:
                    for rid in reversed(held):
                        yield (None, RuntimeError("model says no")) if rid == "3" else (_Answer(rid), None)
                    held = []
            for rid in held:
                yield _Answer(rid), None
            self.ended = True

        return answers()


def test_stream_level_matches_answers_to_requests_by_id_and_counts_failures():
    settings = serving.LoadSettings(concurrency=(2,), duration_s=10.0, max_requests=8, grpc=True, streaming=True,
                                    timeout_s=5.0)
    client = _StreamClient()
    result = asyncio.run(serving._stream_level(client, "m", [], 2, settings, settings.max_requests))
    assert (result.requests, result.failed) == (7, 1) and result.errors == ["RuntimeError: model says no"]
    assert client.seen == [str(i) for i in range(1, 9)] and client.ended  # every request sent, the stream closed
    assert result.p50_ms <= result.p99_ms and result.wall_s < 10


def test_a_broken_stream_fails_the_requests_waiting_on_it_and_ends_the_level():
    settings = serving.LoadSettings(concurrency=(2,), duration_s=10.0, max_requests=50, grpc=True, streaming=True,
                                    timeout_s=5.0)
    result = asyncio.run(serving._stream_level(_StreamClient(break_after=4), "m", [], 2, settings, 50))
    assert result.requests == 3 and result.failed >= 1  # 1, 2 and 4 answered (3 an error), then the stream broke
    assert "ConnectionError: stream reset by peer" in result.errors and result.wall_s < 5


def _grpc_result(data: bytes):
    """tritonclient's gRPC ``InferResult`` for an answer carrying output ``y`` (FP32, 3x4x1x1) as ``data``."""
    grpc = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse(model_name="m")
    output = response.outputs.add(name="y", datatype="FP32")
    output.shape.extend([3, 4, 1, 1])
    response.raw_output_contents.append(data)
    return grpc.InferResult(response)


def test_an_answer_without_its_output_data_counts_as_failed():
    """pytriton under numpy 2 answers with every output's shape and no bytes: such answers are failures."""
    full, empty = _grpc_result(np.ones((3, 4, 1, 1), np.float32).tobytes()), _grpc_result(b"")
    serving.check_outputs(full, ["y"])
    with pytest.raises(serving.ServeError, match=r"Output 'y' came back without its data \(cannot reshape array of "
                                                  r"size 0 into shape \(3,4,1,1\)\)"):
        serving.check_outputs(empty, ["y"])
    with pytest.raises(serving.ServeError, match="The answer has no output 'z'"):
        serving.check_outputs(full, ["z"])

    class Answers:
        def __init__(self):
            self.n = 0

        async def infer(self, model, inputs):
            self.n += 1
            return empty if self.n % 2 else full

    settings = serving.LoadSettings(concurrency=(2,), duration_s=10.0, max_requests=10)
    result = asyncio.run(serving._level(Answers(), "m", [], 2, settings, settings.max_requests, ["y"]))
    assert (result.requests, result.failed) == (5, 5)
    assert result.errors == ["ServeError: Output 'y' came back without its data (cannot reshape array of size 0 into "
                             "shape (3,4,1,1))"]


class _ShmClient:
    """Takes shared-memory regions (``refuse``: refuses them, as a server with the protocol closed does)."""

    def __init__(self, refuse: bool):
        self.refuse, self.registered, self.unregistered = refuse, [], []

    async def register_system_shared_memory(self, name, key, byte_size):
        if self.refuse:
            raise RuntimeError("This protocol is restricted")
        self.registered.append((name, key, byte_size))

    async def unregister_system_shared_memory(self, name):
        self.unregistered.append(name)


@pytest.mark.parametrize("refuse", [False, True])
def test_inputs_in_shared_memory_are_registered_then_freed(refuse):
    grpc = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
    shm = pytest.importorskip("tritonclient.utils.shared_memory", reason="tritonclient is not installed")
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    item = grpc.InferInput("x", [2, 3, 4], "FP32")
    item.set_data_from_numpy(x)
    client, regions = _ShmClient(refuse), []

    async def run():
        try:
            await serving._inputs_in_shared_memory(client, [(item, x)], regions, "host:1")
            (name, handle, _, kind), = regions
            assert kind == "system"
            np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [2, 3, 4]), x)
            return name
        finally:
            await serving._release_regions(client, regions)

    if refuse:
        says = (r"The server at host:1 did not take the system shared-memory region of input 'x' .*restricted.*"
                r"shared memory on\); leave shared_memory 'none' otherwise")
        with pytest.raises(serving.ServeError, match=says):
            asyncio.run(run())
        assert client.unregistered == []  # never registered: only freed here
    else:
        name = asyncio.run(run())
        assert client.registered == [(name, "/" + name, x.nbytes)] and client.unregistered == [name]
        request = item._get_tensor()
        assert request.parameters["shared_memory_region"].string_param == name  # the request names the region
        assert item._get_content() is None  # and carries no data
    assert regions == [] and shm.mapped_shared_memory_regions() == []


class _FakeCudaShm:
    """tritonclient.utils.cuda_shared_memory's calls trtkit makes, on host memory (``fail``: no GPU here)."""

    def __init__(self, fail: bool = False):
        self.fail, self.made, self.destroyed = fail, [], []

    def create_shared_memory_region(self, name, byte_size, device_id):
        if self.fail:
            raise RuntimeError("unable to create cuda shared memory handle on device 0")
        handle = {"name": name, "device": device_id, "data": bytearray(byte_size)}
        self.made.append(handle)
        return handle

    def set_shared_memory_region(self, handle, arrays):
        handle["data"][:] = b"".join(a.tobytes() for a in arrays)

    def get_raw_handle(self, handle):
        return b"raw-" + handle["name"].encode()

    def destroy_shared_memory_region(self, handle):
        self.destroyed.append(handle["name"])


class _CudaShmClient:
    def __init__(self):
        self.registered, self.unregistered = [], []

    async def register_cuda_shared_memory(self, name, raw_handle, device_id, byte_size):
        self.registered.append((name, raw_handle, device_id, byte_size))

    async def unregister_cuda_shared_memory(self, name):
        self.unregistered.append(name)


@pytest.mark.parametrize("fail", [False, True])
def test_inputs_in_cuda_shared_memory_are_shared_by_their_ipc_handle_then_freed(fail, monkeypatch):
    grpc = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
    fake = _FakeCudaShm(fail)
    monkeypatch.setattr(serving, "_shared_memory_module", lambda kind="system": fake if kind == "cuda" else None)
    x = np.arange(6, dtype=np.float32)
    item = grpc.InferInput("x", [6], "FP32")
    item.set_data_from_numpy(x)
    client, regions = _CudaShmClient(), []

    async def run():
        try:
            await serving._inputs_in_shared_memory(client, [(item, x)], regions, "host:1", "cuda", 3)
            assert bytes(fake.made[0]["data"]) == x.tobytes() and fake.made[0]["device"] == 3
        finally:
            await serving._release_regions(client, regions)

    if fail:
        says = (r"Cannot make a CUDA shared-memory region for input 'x' on GPU 3 of this host \(unable to create.*\); "
                r"shared_memory 'cuda' needs a CUDA GPU on the server's host; use shared_memory 'system'")
        with pytest.raises(serving.ServeError, match=says):
            asyncio.run(run())
        assert client.registered == [] and fake.destroyed == []
    else:
        asyncio.run(run())
        (name, raw, device, size), = client.registered
        assert raw == b"raw-" + name.encode() and device == 3 and size == x.nbytes
        assert client.unregistered == [name] and fake.destroyed == [name]
        assert item._get_tensor().parameters["shared_memory_region"].string_param == name
        assert item._get_content() is None  # the request carries no data
    assert regions == []


class _ServerClient(_Client):
    """A whole server for :func:`serving.load_test`: ready, one FP32 input and no outputs; answers every request."""

    async def is_model_ready(self, model):
        return True

    async def get_model_metadata(self, model, **_):
        return {"inputs": [{"name": "x", "shape": [-1, 2], "datatype": "FP32"}], "outputs": []}

    async def get_model_config(self, model, **_):
        return {"config": {"max_batch_size": 4}}

    async def infer(self, model, inputs, **_):
        self.n += 1
        await asyncio.sleep(0)

    async def close(self):
        pass


class _Module:
    class InferInput:
        def __init__(self, name, shape, datatype):
            self.shape = shape

        def set_data_from_numpy(self, array):
            assert list(array.shape) == self.shape


def test_load_starts_only_when_the_ready_hook_returns(monkeypatch):
    client = _ServerClient()
    monkeypatch.setattr(serving, "_client", lambda url, grpc: (_Module, client))
    seen = []
    settings = serving.LoadSettings(concurrency=(2,), duration_s=5.0, max_requests=6, warmup_s=0.0)
    (result,) = serving.load_test("127.0.0.1:1", "m", settings, ready=lambda: seen.append(client.n))
    assert seen == [0]  # called once, before any request
    assert result.requests == 6 and client.n == 6


def fake_client(url, grpc):
    """A client factory for client processes (imported there by name): a fake server that answers everything."""
    return _Module, _ServerClient()


class _NotReady(_ServerClient):
    async def is_model_ready(self, model):
        return False


def not_ready_client(url, grpc):
    return _Module, _NotReady()


def test_levels_spread_over_client_processes_are_merged_into_one_result_each():
    from trtkit.bench.client_procs import load_in_procs

    settings = serving.LoadSettings(concurrency=(1, 3), duration_s=0.3, max_requests=400, warmup_s=0.0, procs=2)
    one, three = load_in_procs("127.0.0.1:1", "m", settings, serving._load_test, serving._level_result,
                                client_factory=f"{__name__}:fake_client")
    assert (one.concurrency, one.procs, three.concurrency, three.procs) == (1, 1, 3, 2)  # a level of 1 on one process
    for level in (one, three):
        assert level.failed == 0 and 0 < level.requests <= 400 and level.ips > 0
        assert level.p50_ms <= level.p99_ms and 0 < level.client_cpu_frac and level.latencies_ms == []


def test_a_client_process_that_fails_is_named():
    from trtkit.bench.client_procs import load_in_procs

    settings = serving.LoadSettings(concurrency=(2,), duration_s=0.3, warmup_s=0.0, procs=2)
    with pytest.raises(serving.ServeError, match=r"2 of 2 client processes failed: ServeError: Model 'm' is not ready"):
        load_in_procs("127.0.0.1:1", "m", settings, serving._load_test, serving._level_result,
                      client_factory=f"{__name__}:not_ready_client")


def test_a_levels_parts_pool_their_latencies_and_count_every_failure():
    from trtkit.bench.client_procs import merge, spread

    assert spread(64, 3) == [22, 21, 21] and spread(1, 1) == [1]
    parts = [{"latencies_ms": [1.0, 2.0], "failed": 3, "errors": ["E: a"], "wall_s": 1.0, "cpu_s": 0.5},
             None,  # a process that sat the level out
             {"latencies_ms": [3.0, 4.0, 5.0, 6.0], "failed": 0, "errors": [], "wall_s": 2.0, "cpu_s": 1.9}]
    level = merge(8, parts, serving.LoadSettings(batch=2), serving._level_result)
    assert (level.requests, level.failed, level.errors, level.procs) == (6, 3, ["E: a"], 2)
    assert level.ips == 6.0 and level.wall_s == 2.0  # 6 requests of 2 rows over the longer wall
    assert level.p50_ms == 3.5 and level.client_cpu_frac == 0.95 and level.cpu_s == 2.4


def test_a_busy_client_is_named_under_the_table():
    import io

    from rich.console import Console

    busy = serving._level_result(64, serving.LoadSettings(), [1.0], [], 1.0, 0.97)
    calm = serving._level_result(8, serving.LoadSettings(), [1.0], [], 1.0, 0.2)
    out = io.StringIO()
    serving.render([calm, busy], Console(file=out, width=200), title="t")
    text = " ".join(out.getvalue().split())
    assert "concurrency 64: the busiest of 1 client process(es) used 0.97 of a core" in text
    assert "spread it over more processes (procs=N)" in text  # the library's words; the CLI says --procs N
    assert "concurrency 8: the busiest" not in text
    assert "procs client CPU" in text and "0.97" in text.split("concurrency 64:")[0]  # the table has it too


@pytest.mark.parametrize("extra, hint", [
    (["--grpc"], "(--procs N, or send with trtkit's wire client: --client wire)"),
    (["--grpc", "--client", "wire"], "(--procs N)"),
    ([], "(--procs N)"),  # HTTP: the wire client speaks gRPC only
])
def test_the_cli_names_the_ways_out_of_a_busy_client(extra, hint, monkeypatch, capsys):
    busy = serving._level_result(64, serving.LoadSettings(), [1.0], [], 1.0, 0.97)
    monkeypatch.setattr(serving, "load_test", lambda *a, **k: [busy])
    assert cli_main.main(["bench", "--server", "127.0.0.1:1", "--model", "m", "--concurrency", "64", *extra]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"the client may be what limits this level: spread it over more processes {hint}" in text
