"""Load on a running Triton server (``trtkit bench --server URL --model NAME``): what perf_analyzer would report.

For each concurrency, that many asyncio workers send requests back to back with tritonclient's async clients (HTTP or
gRPC) until ``duration_s`` or ``max_requests`` (whichever first); a short warm-up at the same concurrency comes
first. Latency is each request's round trip seen by the client. Inputs are random arrays of the model's input shapes
(from the server's model metadata) at ``batch`` rows per request. A request counts as answered only when every output
the model's metadata lists comes back with its data (a server can answer with an output's shape and no bytes: pytriton
under numpy 2 does); otherwise it counts as failed.

Each input is encoded once and the same encoded input goes with every request. With ``shared_memory="system"`` (as
perf_analyzer's ``--shared-memory system``), each input is written once into a system shared-memory region that the
server is told about, and requests carry only the region's name: the server reads the input from there instead of the
request (a server on this host only). With ``shared_memory="cuda"`` (perf_analyzer's ``--shared-memory cuda``) each
input is written once into device memory on GPU ``cuda_device`` of this host and shared with the server by its CUDA IPC
handle, so a server whose backend runs on the GPU (Triton's TensorRT backend) takes the input device to device,
without the copy through page-locked host memory. Outputs come back in the answers either way.

With ``procs`` above 1, each level's requests are spread over that many client processes (one Python process is
often the limit at high request rates): each connects and sets up its inputs, the processes start each level
together, and their answers are merged into one result per level (latencies before the percentiles are taken).
``client_cpu_frac`` says how busy the busiest client process was over its level; near 1.0 (a core) the client, not the
server, may be what limited the level.

With ``streaming=True`` (gRPC only; perf_analyzer's ``--streaming``) the requests go over one bidirectional stream
(``ModelStreamInfer``) instead of one call each: the workers put their requests on the stream and a reader matches the
answers to them by request id. Triton serves unary calls and streams on front-end threads of their own (Triton 2.51:
two for unary calls, one for every stream), so the two kinds of load reach different threads.

With ``client="wire"`` (gRPC only, unary calls) the requests go out through :mod:`trtkit.bench.wire`: the request is
encoded once and written straight onto ``connections`` HTTP/2 connections, each answer read and checked without
tritonclient's machinery, at a fraction of its CPU per request. tritonclient still finds the model's inputs and
registers the shared memory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from trtkit.bench.stats import percentile
from trtkit.errors import DependencyError, ServeError, UsageError

logger = logging.getLogger("trtkit")

# Triton data type -> numpy dtype, for the random inputs
_DTYPES = {
    "FP32": np.float32,
    "FP16": np.float16,
    "INT32": np.int32,
    "INT64": np.int64,
    "INT8": np.int8,
    "UINT8": np.uint8,
    "BOOL": np.bool_,
}


# where requests carry their inputs: in the request, in system shared memory on the server's host, or in device
# memory there (CUDA IPC)
SHARED_MEMORY = ("none", "system", "cuda")

# what sends the requests: tritonclient's asyncio clients, or trtkit's own HTTP/2 writer of a request encoded once
CLIENTS = ("tritonclient", "wire")


@dataclass(frozen=True)
class LoadSettings:
    """How much load: concurrency levels, how long or how many requests each, rows per request."""

    concurrency: tuple = (1, 8, 64)
    duration_s: float = 5.0
    max_requests: int = 100_000
    warmup_s: float = 0.5
    batch: int = 1
    grpc: bool = False
    timeout_s: float = 30.0
    keep_latencies: bool = False  # LoadResult.latencies_ms (to merge the levels of several client processes)
    shared_memory: str = "none"  # "system"/"cuda": inputs in shared-memory regions (a server on this host only)
    cuda_device: int = 0  # with shared_memory="cuda": the GPU of the inputs' regions
    streaming: bool = False  # gRPC only: the requests over one bidirectional stream instead of a call each
    procs: int = 1  # client processes each level's requests are spread over, started together
    client: str = "tritonclient"  # or "wire" (gRPC unary calls only): trtkit.bench.wire
    connections: int = 1  # with client="wire": HTTP/2 connections per client process

    def check(self) -> None:
        if self.client not in CLIENTS:
            raise UsageError(
                f"client {self.client!r}: give one of {', '.join(CLIENTS)}", field="client", accepted=", ".join(CLIENTS)
            )
        if self.client == "wire" and (not self.grpc or self.streaming):
            raise UsageError(
                "client 'wire' sends gRPC calls, one per request: it needs gRPC and no streaming; or use client "
                "'tritonclient'",
                field="client",
                accepted="'wire' with gRPC, without streaming",
            )
        if self.streaming and not self.grpc:
            raise UsageError(
                "streaming needs gRPC (Triton streams inference over gRPC only); use gRPC or leave streaming off",
                field="streaming",
                accepted="with gRPC",
            )
        if self.shared_memory not in SHARED_MEMORY:
            raise UsageError(
                f"shared_memory {self.shared_memory!r}: give one of {', '.join(SHARED_MEMORY)}",
                field="shared_memory",
                accepted=", ".join(SHARED_MEMORY),
            )
        if int(self.cuda_device) < 0:
            raise UsageError(
                f"cuda_device must be 0 or more, not {self.cuda_device}", field="cuda_device", accepted="0 or more"
            )
        if not self.concurrency or any(int(c) < 1 for c in self.concurrency):
            raise UsageError(
                f"concurrency {','.join(map(str, self.concurrency))}: give levels of 1 or more, e.g. (1, 8, 64)",
                field="concurrency",
                accepted="levels of 1 or more",
            )
        for name, ok, accepted in (
            ("duration_s", self.duration_s > 0, "above 0"),
            ("max_requests", self.max_requests >= 1, "1 or more"),
            ("batch", self.batch >= 1, "1 or more"),
            ("warmup_s", self.warmup_s >= 0, "0 or more"),
            ("procs", int(self.procs) >= 1, "1 or more"),
            ("connections", int(self.connections) >= 1, "1 or more"),
        ):
            if not ok:
                raise UsageError(f"{name} must be {accepted}, not {getattr(self, name)}", field=name, accepted=accepted)
        if int(self.connections) != 1 and self.client != "wire":
            raise UsageError(
                f"connections {self.connections} is for the wire client (tritonclient keeps one channel a process); "
                "use the wire client or leave connections at 1",
                field="connections",
                accepted="1, or more with the wire client",
            )


@dataclass
class LoadResult:
    """One concurrency level: requests answered and failed, inferences/s (rows), latency percentiles in ms."""

    concurrency: int
    requests: int
    failed: int
    wall_s: float
    ips: float
    rps: float
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    errors: list = field(default_factory=list)
    latencies_ms: list = field(default_factory=list)
    cpu_s: float | None = None  # the client processes' CPU over the level, all together
    procs: int = 1  # client processes that sent the level's requests
    client_cpu_frac: float | None = None  # the busiest client process's CPU over its level, in cores (one GIL: 1.0)

    def to_json(self) -> dict:
        data = asdict(self)
        if not self.latencies_ms:
            del data["latencies_ms"]
        return data


def load_test(url: str, model: str, settings: LoadSettings | None = None, *, ready=None) -> list:
    """Put load on ``model`` at ``url`` at each concurrency; one :class:`LoadResult` per level.

    ``ready`` (one client process only): called (in a worker thread) once the client is connected and its inputs are
    set up, before the first level's warm-up; the load starts when it returns. A caller running several client
    processes of its own holds each there until all are ready, so that their levels run at the same time.

    Raises:
        DependencyError: tritonclient is not installed.
        ServeError: the server or model is not ready, or its inputs cannot be made up (a dynamic dimension); with
            ``procs`` above 1, a client process that failed or did not answer in time.
        UsageError: ``ready`` with ``procs`` above 1.
    """
    settings = settings or LoadSettings()
    settings.check()
    if int(settings.procs) > 1:
        if ready is not None:
            raise UsageError("ready is for one client process; with procs above 1 trtkit starts the processes together")
        from trtkit.bench.client_procs import load_in_procs

        return load_in_procs(url, model, settings, _load_test, _level_result)
    first = None if ready is None else (lambda i: ready() if i == 0 else None)
    return asyncio.run(_load_test(url, model, settings, before_level=first))


def _client(url: str, grpc: bool):
    try:
        if grpc:
            from tritonclient.grpc import aio as module
        else:
            from tritonclient.http import aio as module
    except ImportError as exc:
        raise DependencyError(
            f'Load against a server needs tritonclient ({exc}); install it with pip install "trtkit[serve]"'
        ) from exc
    return module, module.InferenceServerClient(url)


async def _load_test(url: str, model: str, settings: LoadSettings, caps=None, before_level=None, shares=None) -> list:
    """One client process's levels. ``shares``: its requests in flight at each level (default ``concurrency``; 0: it
    sits the level out, None in the results); ``caps``: its request cap per level (default ``max_requests``);
    ``before_level(i)``: called in a thread before level ``i`` (several processes start each level together)."""
    module, client = _client(_strip_scheme(url), settings.grpc)
    regions: list = []
    wire = None
    try:
        inputs, outputs = await _inputs(client, module, model, settings, url)
        if settings.shared_memory != "none":
            await _inputs_in_shared_memory(client, inputs, regions, url, settings.shared_memory, settings.cuda_device)
        results: list = []
        run_level = _stream_level if settings.streaming else _level
        if settings.client == "wire":
            wire = _wire_client(url, model, inputs, regions, outputs, settings)
            run_level = _wire_level(wire)
        for i, level in enumerate(settings.concurrency):
            share = int(level if shares is None else shares[i])
            cap = settings.max_requests if caps is None else caps[i]
            if before_level is not None:
                await asyncio.to_thread(before_level, i)
            if share == 0:
                results.append(None)
                continue
            warm = LoadSettings(**{**asdict(settings), "duration_s": settings.warmup_s})
            if settings.warmup_s > 0:
                await run_level(client, model, inputs, share, warm, cap, outputs)
            results.append(await run_level(client, model, inputs, share, settings, cap, outputs))
        return results
    finally:
        try:
            if wire is not None:
                wire.close()
            await _release_regions(client, regions)
        finally:
            await client.close()


def _wire_client(url: str, model: str, inputs: list, regions: list, outputs: list, settings: LoadSettings):
    """A :class:`~trtkit.bench.wire.WireClient` sending ``inputs`` to ``model`` (each input's data in the request, or
    the name of its shared-memory region in ``regions``, made in the inputs' order), connected."""
    from tritonclient.grpc import service_pb2

    from trtkit.bench.wire import Outputs, WireClient

    request = service_pb2.ModelInferRequest(model_name=model)
    for i, (item, array) in enumerate(inputs):
        tensor = request.inputs.add(name=item.name(), datatype=item.datatype(), shape=list(item.shape()))
        if regions:
            tensor.parameters["shared_memory_region"].string_param = regions[i][0]
            tensor.parameters["shared_memory_byte_size"].int64_param = array.nbytes
        else:
            request.raw_input_contents.append(array.tobytes())
    return WireClient(
        _strip_scheme(url),
        request.SerializeToString(),
        Outputs(tuple(outputs)),
        connections=settings.connections,
        timeout_s=settings.timeout_s,
    )


def _wire_level(wire):
    """A level function (as :func:`_level`) running ``wire``'s closed loop in a thread (it blocks on its sockets)."""

    async def level(client, model, inputs, concurrency, settings, cap, outputs=()):
        latencies, errors, wall, cpu = await asyncio.to_thread(wire.level, concurrency, settings.duration_s, cap)
        return _level_result(concurrency, settings, latencies, errors, wall, cpu)

    return level


def _shared_memory_module(kind: str = "system"):
    try:
        if kind == "cuda":
            import tritonclient.utils.cuda_shared_memory as shm
        else:
            import tritonclient.utils.shared_memory as shm
    except (ImportError, RuntimeError) as exc:  # the CUDA utilities raise RuntimeError without cuda-python
        raise DependencyError(
            f"shared_memory {kind!r} needs tritonclient's {kind} shared-memory utilities ({exc}); install them with "
            'pip install "trtkit[serve]"',
            field="shared_memory",
        ) from exc
    return shm


async def _inputs_in_shared_memory(
    client, inputs: list, regions: list, url: str, kind: str = "system", device: int = 0
) -> None:
    """Write each input's data once into its own shared-memory region (``kind`` ``"system"``, or ``"cuda"``: device
    memory on GPU ``device``), register the region with the server and point the input at it (requests then carry
    only the region's name). ``regions`` collects what was made, for :func:`_release_regions`, as it is made."""
    shm = _shared_memory_module(kind)
    for item, array in inputs:
        name = f"trtkit-{os.getpid()}-{len(regions)}"
        if kind == "cuda":
            try:
                handle = shm.create_shared_memory_region(name, array.nbytes, int(device))
            except Exception as exc:  # tritonclient's CudaSharedMemoryException: no GPU, no driver, a bad device
                raise ServeError(
                    f"Cannot make a CUDA shared-memory region for input '{item.name()}' on GPU {device} of this host "
                    f"({exc}); shared_memory 'cuda' needs a CUDA GPU on the server's host; use shared_memory 'system' "
                    "otherwise",
                    field="shared_memory",
                ) from exc
        else:
            handle = shm.create_shared_memory_region(name, "/" + name, array.nbytes)
        regions.append([name, handle, False, kind])
        shm.set_shared_memory_region(handle, [array])
        try:
            if kind == "cuda":
                await client.register_cuda_shared_memory(name, shm.get_raw_handle(handle), int(device), array.nbytes)
            else:
                await client.register_system_shared_memory(name, "/" + name, array.nbytes)
        except Exception as exc:  # tritonclient's InferenceServerException
            raise ServeError(
                f"The server at {url} did not take the {kind} shared-memory region of input '{item.name()}' ({exc}); "
                "shared memory works only with a server on this host that lets clients use it (one served with "
                "shared memory on); leave shared_memory 'none' otherwise",
                field="shared_memory",
            ) from exc
        regions[-1][2] = True
        item.set_shared_memory(name, array.nbytes)


async def _release_regions(client, regions: list) -> None:
    """Unregister (from the server) and free the shared-memory regions of :func:`_inputs_in_shared_memory`."""
    for name, handle, registered, kind in regions:
        shm = _shared_memory_module(kind)
        try:
            if registered:
                unregister = (
                    client.unregister_cuda_shared_memory if kind == "cuda" else client.unregister_system_shared_memory
                )
                await unregister(name)
        except Exception:  # noqa: BLE001 - a server gone away keeps nothing registered; the region is still freed
            pass
        finally:
            shm.destroy_shared_memory_region(handle)
    regions.clear()


def _strip_scheme(url: str) -> str:
    for scheme in ("http://", "https://", "grpc://"):
        if url.startswith(scheme):
            return url[len(scheme) :]
    return url


async def _inputs(client, module, model: str, settings: LoadSettings, url: str) -> tuple:
    """``(inputs to send, names of the outputs every answer must carry)`` from the model's metadata; each input is
    ``(tritonclient InferInput, its numpy data)``."""
    try:
        ready = await client.is_model_ready(model)
    except Exception as exc:  # tritonclient raises its own error types and connection errors
        raise ServeError(f"No Triton server answers {'gRPC' if settings.grpc else 'HTTP'} at {url}: {exc}") from exc
    if not ready:
        raise ServeError(f"Model '{model}' is not ready on the server at {url} (not loaded, or named otherwise there)")
    meta = await client.get_model_metadata(model, **({"as_json": True} if settings.grpc else {}))
    config = await client.get_model_config(model, **({"as_json": True} if settings.grpc else {}))
    config = config.get("config", config)
    if settings.streaming and config.get("backend") == "python":
        logger.warning(
            "Model '%s' runs on Triton's Python backend, which crashed Triton 2.51 (SIGSEGV in its execute) under "
            "gRPC streams in trtkit's tests; if the server dies, load it with unary calls (streaming off)",
            model,
        )
    batched = int(config.get("max_batch_size", 0)) > 0
    inputs = []
    rng = np.random.default_rng(0)
    for spec in meta["inputs"]:
        shape = [int(d) for d in spec["shape"]]
        if batched:
            shape = [settings.batch, *shape[1:]]
        if any(d < 0 for d in shape):
            raise ServeError(
                f"Input '{spec['name']}' of model '{model}' has a dynamic dimension {spec['shape']}; "
                "inputs are made for a server only at fixed shapes"
            )
        dtype = _DTYPES.get(spec["datatype"])
        if dtype is None:
            raise ServeError(f"Input '{spec['name']}': data type {spec['datatype']} is not one trtkit can make up")
        data = rng.standard_normal(shape) if dtype in (np.float32, np.float16) else rng.integers(0, 2, shape)
        array: np.ndarray = np.ascontiguousarray(data.astype(dtype))
        item = module.InferInput(spec["name"], shape, spec["datatype"])
        item.set_data_from_numpy(array)
        inputs.append((item, array))
    return inputs, [spec["name"] for spec in meta.get("outputs", [])]


def check_outputs(result, names) -> None:
    """Raises ServeError: the answer ``result`` (a tritonclient ``InferResult``) lacks one of the outputs ``names`` or
    carries it without its data."""
    for name in names:
        try:
            array = result.as_numpy(name)
        except ValueError as exc:  # tritonclient reshaping fewer bytes than the output's shape needs
            raise ServeError(f"Output '{name}' came back without its data ({exc})") from exc
        if array is None:
            raise ServeError(f"The answer has no output '{name}'")


async def _level(
    client, model: str, inputs: list, concurrency: int, settings: LoadSettings, cap: int, outputs=()
) -> LoadResult:
    inputs = [item for item, _ in inputs]
    latencies: list = []
    errors: list = []
    budget = [cap]
    deadline = time.perf_counter() + settings.duration_s

    if settings.grpc:  # gRPC's own deadline: no task per request around the call, as asyncio.wait_for makes

        def call():
            return client.infer(model, inputs, client_timeout=settings.timeout_s)
    else:

        def call():
            return asyncio.wait_for(client.infer(model, inputs), settings.timeout_s)

    async def worker():
        while budget[0] > 0 and time.perf_counter() < deadline:
            budget[0] -= 1
            start = time.perf_counter()
            try:
                result = await call()
                took = (time.perf_counter() - start) * 1e3
                check_outputs(result, outputs)
            except Exception as exc:  # a failed request is counted and the load goes on
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(took)

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return _level_result(concurrency, settings, latencies, errors, wall, cpu)


async def _stream_level(
    client, model: str, inputs: list, concurrency: int, settings: LoadSettings, cap: int, outputs=()
) -> LoadResult:
    """:func:`_level` over one gRPC stream: ``concurrency`` workers put their requests on it, each with an id of its
    own, and a reader hands each answer to the worker whose id it carries. An answer that is an error carries no id
    (tritonclient keeps only the message), so it goes to the request waiting longest."""
    inputs = [item for item, _ in inputs]
    latencies: list = []
    errors: list = []
    budget = [cap]
    deadline = time.perf_counter() + settings.duration_s
    loop = asyncio.get_running_loop()
    sends: asyncio.Queue = asyncio.Queue()
    waiting: dict = {}  # request id -> future of its answer, oldest first
    ids = iter(range(1, 1 << 62))

    async def requests():
        while (request := await sends.get()) is not None:
            yield request

    async def read(answers):
        why: Exception = ServeError("The server ended the stream before it answered")
        try:
            async for result, error in answers:
                if error is None:
                    future = waiting.pop(result.get_response().id, None)
                elif waiting:
                    future = waiting.pop(next(iter(waiting)))
                else:
                    continue
                if future is not None and not future.done():
                    future.set_result((result, error))
        except Exception as exc:  # the stream broke
            why = exc
            raise
        finally:  # every request still waiting fails with the reason
            for future in waiting.values():
                if not future.done():
                    future.set_exception(why)
            waiting.clear()

    async def worker():
        while budget[0] > 0 and time.perf_counter() < deadline and not reader.done():
            budget[0] -= 1
            rid = str(next(ids))
            future = waiting[rid] = loop.create_future()
            start = time.perf_counter()
            await sends.put({"model_name": model, "inputs": inputs, "request_id": rid})
            try:
                result, error = await asyncio.wait_for(future, settings.timeout_s)
                took = (time.perf_counter() - start) * 1e3
                if error is not None:
                    raise error
                check_outputs(result, outputs)
            except Exception as exc:  # a failed request is counted and the load goes on
                waiting.pop(rid, None)
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(took)

    start, cpu = time.perf_counter(), time.process_time()
    reader = asyncio.ensure_future(read(client.stream_infer(requests())))
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await sends.put(None)  # ends the stream once every request put on it is answered
        try:
            await asyncio.wait_for(reader, settings.timeout_s)
        except Exception as exc:  # noqa: BLE001 - the requests it failed are counted; a level with none says why
            if not errors and not latencies:
                errors.append(f"{type(exc).__name__}: {exc}")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return _level_result(concurrency, settings, latencies, errors, wall, cpu)


def _level_result(concurrency: int, settings: LoadSettings, latencies: list, errors: list, wall: float, cpu: float):
    done = sorted(latencies)

    def pct(q):
        return round(percentile(done, q), 4) if done else None

    return LoadResult(
        concurrency,
        len(done),
        len(errors),
        round(wall, 4),
        round(len(done) * settings.batch / wall, 2),
        round(len(done) / wall, 2),
        pct(50),
        pct(90),
        pct(99),
        sorted(set(errors))[:5],
        latencies if settings.keep_latencies else [],
        round(cpu, 4),
        1,
        round(cpu / wall, 3) if wall > 0 else None,
    )


def render(results: list, console, *, title: str, more_procs: str = "procs=N") -> None:
    """The results as a rich table; under it, each level where a client process was near a core's worth of CPU, with
    ``more_procs`` (how to ask for more client processes where the caller takes them) as the way out."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    cols = ("concurrency", "requests", "failed", "inferences/s", "p50 ms", "p90 ms", "p99 ms", "procs", "client CPU")
    for col in cols:
        t.add_column(col, justify="right")
    for r in results:
        cells = [
            ("-" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:,.3f}")
            for v in (r.concurrency, r.requests, r.failed, r.ips, r.p50_ms, r.p90_ms, r.p99_ms, r.procs)
        ]
        t.add_row(*cells, "-" if r.client_cpu_frac is None else f"{r.client_cpu_frac:.2f}")
    console.print(t)
    for r in results:
        for text in r.errors:
            console.print(f"[red]concurrency {r.concurrency}: failed request[/] {text}")
        if r.client_cpu_frac is not None and r.client_cpu_frac >= CLIENT_BUSY:
            console.print(
                f"[yellow]concurrency {r.concurrency}: the busiest of {r.procs} client process(es) used "
                f"{r.client_cpu_frac:.2f} of a core; the client may be what limits this level: spread it over more "
                f"processes ({more_procs})[/]"
            )


# a client process this busy over a level (cores; one GIL) may be what limits it
CLIENT_BUSY = 0.9
