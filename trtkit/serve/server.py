"""``trtkit serve``: engines on a real Triton Inference Server (the pytriton wheel's ``tritonserver``).

Each engine becomes one Triton model. Its inputs, outputs and batch limit come from the engine and its profile 0
(:func:`trtkit.export.triton.triton_model`); ``--max-batch`` may lower the limit, never raise it. Each model gets
``instances`` instances on every GPU of ``gpus`` (Triton's ``instance_group`` count is per GPU too). Triton's dynamic
batcher gathers requests up to the batch limit (waiting at most ``max_queue_delay_us`` for a fuller batch); an
instance runs the gathered requests as one batch and hands each request its slice of the outputs. An instance is a
:class:`~trtkit.runtime.runner.TrtRunner` (CUDA graphs, its own stream) inside Triton's Python backend
(:mod:`trtkit.serve.python_backend`), or the engine on Triton's own TensorRT backend
(:mod:`trtkit.serve.tensorrt_backend`). trtkit writes the model repository and runs ``tritonserver`` on it
(:mod:`trtkit.serve.tritonserver`).

An engine that cannot be loaded is named (:attr:`Server.failures`) and the others are served, unless ``strict``.
Stopping (:meth:`Server.stop`) lets Triton finish the requests in flight, then frees the runners.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtkit import _check
from trtkit.errors import ProfileError, ServeError, TrtkitError, TrtkitInternalError, UsageError
from trtkit.export.triton import GRAPH_BATCHES, TENSORRT_OPTIONS, preferred_batch_sizes, tensorrt_options
from trtkit.serve.logs import log_tail

if TYPE_CHECKING:
    from trtkit.export.triton import TritonModel

logger = logging.getLogger("trtkit")
# how long tritonserver may take to load every model (each Python backend stub loads its engine)
LOAD_TIMEOUT_S = 300.0


# where the engines run: TrtRunners inside Triton's Python backend, or Triton's own TensorRT backend
BACKENDS = ("python", "tensorrt")


@dataclass(frozen=True)
class ServeSettings:
    """How to serve.

    Attributes:
        instances: model instances per GPU, each one runner.
        max_batch: the largest batch the dynamic batcher forms (default: the profile's largest batch).
        max_queue_delay_us: the batcher's longest wait for a fuller batch.
        gpus: the GPUs that get instances.
        host: the address every endpoint binds (loopback by default).
        http_port / grpc_port / metrics_port: Triton's endpoints.
        strict: stop when any engine cannot be loaded, instead of serving the others.
        cuda_graph: replay each batch shape from a CUDA graph.
        exit_timeout_s: how long stopping waits for requests in flight.
        log_file: where Triton's own log goes (default: a file in a temporary folder, quoted on failures).
        shared_memory: open Triton's shared-memory protocol to clients (closed by default, behind a token made up
            per server): any client that reaches the ports can then have the server map this host's shared memory,
            so keep ``host`` on loopback.
        backend: where the engines run: ``"python"`` (default), a runner in each instance's stub process of Triton's
            Python backend; ``"tensorrt"``, Triton's own TensorRT backend from the folder ``triton_backends`` (no
            Python in the request path).
        triton_backends: with ``backend="tensorrt"``: a folder holding ``tensorrt/libtriton_tensorrt.so``, Triton's
            TensorRT backend built for the pytriton wheel's Triton and this environment's TensorRT.
        graph_batches: with ``backend="tensorrt"`` and ``cuda_graph``: ``"every"`` (default) captures a CUDA graph
            for every batch size up to the largest; ``"triton"`` leaves it to the backend (batch 1, the preferred
            sizes and the largest).
        tensorrt_options: with ``backend="tensorrt"``: the backend's latency options to turn on, any of
            ``busy_wait_events``, ``eager_batching`` (its model configuration's, see
            :data:`~trtkit.export.triton.TENSORRT_CONFIG_OPTIONS`) and ``blocking`` (each instance on a thread of
            its own); none by default (Triton's defaults).
        preferred_batch_sizes: the batch sizes the dynamic batcher sends as soon as it has that many requests queued;
            with fewer than the smallest it waits up to ``max_queue_delay_us`` for more (None: the profile's opt and
            largest batch, within ``max_batch``).
        grpc_allocation_pool: Triton's ``--grpc-infer-allocation-pool-size``, the gRPC request states its front end
            keeps for reuse (None: Triton's own, 8).
    """

    instances: int = 1
    max_batch: int | None = None
    max_queue_delay_us: int = 100
    gpus: tuple = (0,)
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    strict: bool = False
    cuda_graph: bool = True
    exit_timeout_s: int = 30
    log_file: str | None = None
    shared_memory: bool = False
    backend: str = "python"
    triton_backends: str | None = None
    graph_batches: str = "every"
    tensorrt_options: tuple = ()
    grpc_allocation_pool: int | None = None
    preferred_batch_sizes: tuple | None = None

    def check(self) -> None:
        """Raises UsageError for a setting no server could use."""
        try:
            options = tensorrt_options(self.tensorrt_options)
        except TrtkitError as exc:
            raise UsageError(str(exc), field="tensorrt_options", accepted=", ".join(TENSORRT_OPTIONS)) from None
        if options and self.backend != "tensorrt":
            raise UsageError(
                f"tensorrt_options are options of Triton's TensorRT backend (the 'tensorrt' backend), not of the "
                f"{self.backend!r} backend",
                field="tensorrt_options",
            )
        _check.choice("graph_batches", self.graph_batches, GRAPH_BATCHES)
        if self.graph_batches != "every" and self.backend != "tensorrt":
            raise UsageError(
                f"graph_batches {self.graph_batches!r} chooses the CUDA graphs of Triton's TensorRT backend "
                f"(the 'tensorrt' backend); the {self.backend!r} backend's runners capture one for every shape they "
                "meet",
                field="graph_batches",
            )
        _check.choice("backend", self.backend, BACKENDS)
        if self.triton_backends and self.backend != "tensorrt":
            raise UsageError(
                f"triton_backends is Triton's TensorRT backend's folder, for the 'tensorrt' backend, not "
                f"{self.backend!r}",
                field="triton_backends",
            )
        if self.grpc_allocation_pool is not None and int(self.grpc_allocation_pool) < 1:
            raise UsageError(
                f"grpc_allocation_pool must be 1 or more request states, not {self.grpc_allocation_pool}",
                field="grpc_allocation_pool",
                accepted="1 or more (None: Triton's default)",
            )
        if int(self.instances) < 1:
            raise UsageError(
                f"instances must be 1 or more, not {self.instances}", field="instances", accepted="1 or more"
            )
        if self.preferred_batch_sizes is not None and (
            not self.preferred_batch_sizes or any(int(b) < 1 for b in self.preferred_batch_sizes)
        ):
            raise UsageError(
                f"preferred_batch_sizes={','.join(map(str, self.preferred_batch_sizes)) or '()'}: give batch sizes of "
                "1 or more, e.g. (8, 16, 32), or None for the profile's",
                field="preferred_batch_sizes",
                accepted="batch sizes of 1 or more",
            )
        if self.max_batch is not None and int(self.max_batch) < 1:
            raise UsageError(
                f"max_batch must be 1 or more, not {self.max_batch}", field="max_batch", accepted="1 or more"
            )
        if int(self.max_queue_delay_us) < 0:
            raise UsageError(
                f"max_queue_delay_us must be 0 or more, not {self.max_queue_delay_us}",
                field="max_queue_delay_us",
                accepted="0 or more",
            )
        if not self.gpus or any(int(g) < 0 for g in self.gpus) or len(set(self.gpus)) != len(self.gpus):
            raise UsageError(
                f"gpus={','.join(map(str, self.gpus))}: give distinct GPU indices, e.g. (0, 1)",
                field="gpus",
                accepted="distinct GPU indices",
            )

    def devices(self) -> list:
        """The GPU of each instance, per model: ``instances`` on each GPU, in order."""
        return [int(g) for g in self.gpus for _ in range(int(self.instances))]

    def ports(self) -> dict:
        return {"HTTP": int(self.http_port), "gRPC": int(self.grpc_port), "metrics": int(self.metrics_port)}


@dataclass(frozen=True)
class LoadFailure:
    """An engine that could not be served, and why."""

    engine: str
    reason: str


@dataclass
class LoadedModel:
    """One engine ready to serve: its Triton description, batch limit and the GPU of each instance."""

    engine: str
    spec: TritonModel
    max_batch: int
    preferred_batch_sizes: tuple
    devices: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name


def batch_limit(spec, max_batch: int | None, engine, preferred: tuple | None = None) -> tuple:
    """``(max batch, preferred batch sizes)`` for a model, from its profile, ``--max-batch`` and
    ``--preferred-batch`` (``preferred``; default: the profile's within the max batch).

    Raises:
        ProfileError: ``max_batch`` is above the profile's largest batch, or given for an unbatched engine; a
            preferred size outside 1..max batch.
    """
    if preferred is not None:
        limit, _ = batch_limit(spec, max_batch, engine)
        return limit, preferred_batch_sizes(preferred, limit, engine)
    if spec.max_batch_size == 0:
        if max_batch is not None:
            raise ProfileError(
                f"Engine '{engine}' has a fixed first dimension, so Triton serves it unbatched; "
                "leave max_batch unset (or rebuild with a dynamic batch dimension)",
                field="max_batch",
            )
        return 0, ()
    if max_batch is None:
        return spec.max_batch_size, spec.preferred_batch_sizes
    if int(max_batch) > spec.max_batch_size:
        raise ProfileError(
            f"max_batch={max_batch} is above the largest batch of engine '{engine}' "
            f"(profile 0 takes 1..{spec.max_batch_size}); use max_batch={spec.max_batch_size} or "
            "less, or rebuild the engine with a larger max shape",
            field="max_batch",
        )
    within = sorted({s for s in spec.preferred_batch_sizes if s <= int(max_batch)} | {int(max_batch)})
    return int(max_batch), tuple(within)


def load_model(engine, settings: ServeSettings, *, trt=None) -> LoadedModel:
    """Describe ``engine`` for Triton (the engine itself is loaded inside Triton).

    Raises:
        EngineError / ProfileError: the engine cannot be read or served as asked.
    """
    from trtkit.export.triton import triton_model

    spec = triton_model(engine, trt=trt)
    max_batch, preferred = batch_limit(spec, settings.max_batch, engine, settings.preferred_batch_sizes)
    return LoadedModel(str(engine), spec, max_batch, preferred, settings.devices())


class Server:
    """Engines served by one Triton Inference Server, in a process of its own; a context manager.

    Args:
        engines: engine files, one Triton model each (named after the file's stem).
        settings: see :class:`ServeSettings`.
        trt: the ``tensorrt`` module that reads the engines (tests pass a fake).

    Attributes:
        models: the models being served (:class:`LoadedModel`).
        failures: the engines that could not be loaded (:class:`LoadFailure`).
        load_s: seconds to read every engine.
        ready_s: seconds from the engines read to Triton answering ready with every model.
    """

    def __init__(self, engines, settings: ServeSettings | None = None, *, trt=None):
        self.engines = [str(e) for e in engines]
        self.settings = settings or ServeSettings()
        self._trt = trt
        self.models: list = []
        self.failures: list = []
        self.load_s: float | None = None
        self.ready_s: float | None = None
        self._stop = threading.Event()
        self._log_dir: tempfile.TemporaryDirectory | None = None
        self._triton: Any = None  # the tritonserver process (trtkit.serve.tritonserver.TritonProcess), once started
        self._work_dir: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> "Server":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def log_file(self) -> Path:
        if self.settings.log_file:
            return Path(self.settings.log_file)
        if self._log_dir is None:
            raise TrtkitInternalError("Server.log_file asked before start() made the log folder")
        return Path(self._log_dir.name) / "triton.log"

    def start(self) -> "Server":
        """Check the settings and ports, read the engines, start Triton and wait until every model is ready.

        Raises:
            TrtkitError: a bad setting.
            DependencyError: pytriton is missing or cannot run on this Python.
            ServeError: a port is in use, no engine (or, with ``strict``, not every engine) could be loaded,
                or Triton did not become ready (its log's last lines quoted).
        """
        from trtkit.serve.ports import check_ports

        self.settings.check()
        if not self.engines:
            raise TrtkitError("Give at least one engine to serve")
        backend = self._backend()
        check_ports(self.settings.host, self.settings.ports())
        self._load_all()
        self._log_dir = None if self.settings.log_file else tempfile.TemporaryDirectory(prefix="trtkit-serve-")
        started = time.monotonic()
        try:
            self._start_triton(*backend)
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - started
        return self

    def _backend(self) -> tuple:
        """``(backend module, its server environment, TritonProcess keywords: the stub or the backend folders)``.

        Raises:
            DependencyError: what the backend needs is missing.
        """
        from trtkit.serve import python_backend, tensorrt_backend

        if self.settings.backend == "tensorrt":
            folder = tensorrt_backend.tensorrt_backend(self.settings.triton_backends)
            env = tensorrt_backend.backend_environment(self._trt)
            return (
                tensorrt_backend,
                env,
                {"backends": (folder,), "options": tensorrt_backend.backend_config(self.settings)},
            )
        env = python_backend.backend_environment()
        return python_backend, env, {"stub": python_backend.backend_stub()}

    def _load_all(self) -> None:
        started = time.monotonic()
        names: dict = {}
        for engine in self.engines:
            try:
                model = load_model(engine, self.settings, trt=self._trt)
            except TrtkitError as exc:
                self.failures.append(LoadFailure(engine, str(exc)))
                logger.warning("Not serving '%s': %s", engine, exc)
                continue
            if model.name in names:
                self.failures.append(
                    LoadFailure(
                        engine, f"model name '{model.name}' is taken by '{names[model.name]}'; rename one engine file"
                    )
                )
                continue
            names[model.name] = engine
            self.models.append(model)
        self.load_s = time.monotonic() - started
        if self.failures and (self.settings.strict or not self.models):
            listed = "; ".join(f"'{f.engine}': {f.reason}" for f in self.failures)
            why = "strict: every engine must load" if self.models or self.settings.strict else "nothing to serve"
            raise ServeError(f"{why}; could not load {listed}", field="strict" if self.settings.strict else None)

    def _start_triton(self, backend, env: dict, keywords: dict) -> None:
        """The backend's model repository written here, served by the wheel's tritonserver."""
        from trtkit.serve.tritonserver import TritonProcess, server_environment

        self._work_dir = tempfile.TemporaryDirectory(prefix=f"trtkit-serve-{self.settings.backend}-")
        work = Path(self._work_dir.name)
        repo = backend.write_repository(self.models, self.settings, work / "models")
        try:
            self._triton = TritonProcess(repo, self.settings, work, self.log_file, server_environment(env), **keywords)
            failed = self._triton.wait_loaded([m.name for m in self.models], timeout_s=LOAD_TIMEOUT_S)
        except ServeError as exc:
            raise ServeError(f"Triton did not start ({exc}){log_tail(self.log_file)}") from exc
        for model in [m for m in self.models if m.name in failed]:
            self.models.remove(model)
            self.failures.append(LoadFailure(model.engine, f"Triton could not load it: {failed[model.name]}"))
            logger.warning("Not serving '%s': %s", model.engine, failed[model.name])
        if failed and (self.settings.strict or not self.models):
            listed = "; ".join(f"'{f.engine}': {f.reason}" for f in self.failures)
            why = "strict: every engine must load" if self.settings.strict else "nothing to serve"
            raise ServeError(
                f"{why}; could not load {listed}{log_tail(self.log_file)}",
                field="strict" if self.settings.strict else None,
            )

    def urls(self) -> dict:
        s = self.settings
        host = f"[{s.host}]" if ":" in s.host else s.host
        return {
            "http": f"http://{host}:{s.http_port}",
            "grpc": f"{host}:{s.grpc_port}",
            "metrics": f"http://{host}:{s.metrics_port}/metrics",
        }

    def is_alive(self) -> bool:
        return self._triton is not None and self._triton.is_alive()

    def exit_reason(self) -> str | None:
        """Why Triton ended on its own (exit code or signal, and the last lines it printed), None while it runs."""
        return self._triton.exit_reason() if self._triton is not None else None

    def request_stop(self) -> None:
        """Make :meth:`wait` return (safe from a signal handler)."""
        self._stop.set()

    def wait(self, timeout_s: float | None = None, poll_s: float = 0.5) -> bool:
        """Serve until :meth:`request_stop`, Triton exiting, or ``timeout_s``; True when asked to stop."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._stop.is_set() and self.is_alive():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            self._stop.wait(poll_s if left is None else min(poll_s, left))
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop Triton (it finishes the requests in flight first). Idempotent."""
        if self._triton is not None:
            server, self._triton = self._triton, None
            server.stop()
        if self._work_dir is not None:
            self._work_dir.cleanup()
            self._work_dir = None
        if self._log_dir is not None:
            self._log_dir.cleanup()
            self._log_dir = None
