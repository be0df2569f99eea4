"""``TrtRunner``: run a TensorRT engine from Python with nothing in the way.

    with TrtRunner("model.engine") as runner:
        outputs = runner.infer({"images": x})          # dict of numpy arrays

On entry the runner creates its context, a stream, device and pinned host buffers sized for the profile's max shapes,
and binds the tensor addresses once; on exit it frees them (``__del__`` only warns). A call validates every input
before anything is enqueued, sets input shapes only when they change, then enqueues H2D copies, the engine and D2H
copies (or replays the CUDA graph captured for that shape) and synchronizes once. A numpy array passed again is
page-locked where it is and sent from there (:mod:`trtkit.runtime.reuse`).

Device-resident inputs (``__cuda_array_interface__``: CuPy, torch CUDA tensors) are used where they are (with CUDA
graphs, each set of input addresses gets its own graph, up to ``MAX_ADDRESS_GRAPHS``; past that they are copied on
the device). With ``device_outputs=True`` outputs come back as :class:`DeviceArray` views of the runner's buffers.

Shape-tensor inputs (``TensorSpec.is_shape_tensor``: an INT32/INT64 input whose values become a shape) live on the
host, where TensorRT reads them: they are listed in :attr:`TrtRunner.shape_input_specs`, given as numpy arrays in the
same feed, checked against the profile's values and written into host memory the runner owns. Such engines run
without CUDA graphs, since a graph would replay the values it was captured with.

Thread safety: a lock serializes calls on one runner (safe, not parallel). For parallel work give each thread its own
runner; runners share one loaded engine where contexts can share a profile (TensorRT 10+), else pass each the path.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtkit import _version_compat as compat
from trtkit._lazy import tensorrt
from trtkit.errors import EngineError, InputError, UnsupportedError
from trtkit.runtime.buffers import DeviceArray, DeviceBuffer, HostBuffer, copy_into, copy_of
from trtkit.runtime.cuda import default_cuda
from trtkit.runtime.engine import (
    check_engine_file,
    deserialize,
    io_specs,
    load_engine,
    shared_runtime,
)
from trtkit.runtime.graphs import CudaGraph, GraphCache, GraphKey
from trtkit.runtime.inputs import check_shape_values, validate_feed
from trtkit.runtime.io_dtypes import ModelDtypes, engine_manifest, with_manifest_values

logger = logging.getLogger("trtkit")

# Graphs keyed by the addresses of device-resident inputs, per runner, before such inputs get copied instead.
MAX_ADDRESS_GRAPHS = 8

# (id(engine), profile) of the contexts runners hold, where contexts cannot share a profile (TensorRT 8.6, which
# crashes creating a second context on a profile in use): such a context is refused before TensorRT is asked.
_PROFILES_IN_USE: set = set()

# Numpy inputs at least this large go straight from the caller's memory (the driver's staged transfer overlaps its
# host copy with the DMA); smaller ones are copied into the pinned buffer, so their transfer sits inside the CUDA
# graph.
DIRECT_INPUT_BYTES = 1 << 20


@dataclass(frozen=True)
class RunnerStats:
    """What a runner has done since it was activated (:meth:`TrtRunner.stats`).

    Calls by the path they took (a call refused by validation took none): ``host_replays`` and ``device_replays``:
    the shortcuts that replay a graph for numpy or device-resident inputs like those of a call validated before (one
    launch); ``graph_replays``: a graph replayed by the general path (validated first); ``captures``: calls run by
    plain enqueue, then captured into a graph for next time; ``enqueues``: plain enqueue with no graph
    (``cuda_graph`` off, or the capture of such a call failed before).
    """

    calls: int  # synchronous infer calls started
    host_replays: int
    device_replays: int
    graph_replays: int
    captures: int
    enqueues: int
    graphs: int  # graphs held
    address_graphs: int  # graphs captured (or tried) with device inputs bound where they are
    buckets: int  # input-shape combinations seen
    arrays_page_locked: int  # numpy arrays page-locked in place now
    page_locking: bool  # whether arrays passed again are page-locked (off, or stopped after arrays that died young)


@dataclass
class _Settings:
    """How the runner was asked to load its engine, and whether it page-locks reused arrays."""

    source: object  # an engine path, engine bytes or a loaded engine
    stream: int | None  # the caller's stream, or None for one of the runner's own
    check_manifest: bool
    allow_mismatch: bool
    pin_reused: bool
    plugins: tuple = ()  # plugin libraries to load first


@dataclass(slots=True)
class _Held:
    """What an active runner holds besides its context: its own stream (when it made one), two events, the device
    and pinned host buffers sized for the profile's max shapes, and its claim on the engine's profile."""

    own_stream: bool = False
    done_event: Any = None
    wait_event: Any = None
    dev_in: list = field(default_factory=list)
    dev_out: list = field(default_factory=list)
    host_in: list = field(default_factory=list)
    host_out: list = field(default_factory=list)
    profile_key: tuple | None = None  # (id(engine), profile) in _PROFILES_IN_USE, where this runner added it
    shape_host: dict = field(default_factory=dict)  # shape-tensor input name -> the array TensorRT reads values from


@dataclass(slots=True)
class _IoState:
    """What the runner has learnt about its inputs, and what the context holds now."""

    index: dict = field(default_factory=dict)  # input name -> position
    known_shapes: set = field(default_factory=set)  # (input, shape) pairs found inside the profile
    buckets: dict = field(default_factory=dict)  # input shapes -> _Bucket, at the current shape-tensor values
    shapes: tuple | None = None  # the input shapes the context is set to (None: unknown)
    bound: dict = field(default_factory=dict)  # tensor name -> the address the context has for it
    shape_specs: tuple = ()  # the shape-tensor inputs' specs
    values: dict = field(default_factory=dict)  # shape-tensor input name -> the values in its host buffer now


class _Bucket:
    """Everything that depends on one combination of input shapes: output shapes, byte counts, host views."""

    def __init__(self, runner: "TrtRunner", key: tuple, out_shapes: tuple):
        self.key = key
        self.out_shapes = out_shapes
        self.in_nbytes = tuple(_nbytes(s, spec.dtype) for s, spec in zip(key, runner.input_specs))
        self.out_nbytes = tuple(_nbytes(s, spec.dtype) for s, spec in zip(out_shapes, runner.output_specs))
        held = runner._held
        self.in_views = tuple(
            held.host_in[i].view(spec.dtype, s) for i, (s, spec) in enumerate(zip(key, runner.input_specs))
        )
        self.out_views = tuple(
            held.host_out[i].view(spec.dtype, s) for i, (s, spec) in enumerate(zip(out_shapes, runner.output_specs))
        )
        self.device_views: dict | None = None  # output name -> DeviceArray, made on first use (the same every call)
        # per input: numpy data is copied into the pinned buffer (True) or sent from the caller's memory (False)
        self.via_pinned = tuple(n < DIRECT_INPUT_BYTES for n in self.in_nbytes)
        # per input: sent from the runner's pinned buffer (a source, as TrtRunner._enqueue_body takes them)
        self.pinned_sources = tuple((0, buf.ptr) for buf in held.host_in)


def _placeholder(shape, dtype) -> np.ndarray:
    """A stand-in array of ``shape`` and ``dtype`` using no memory, so ``host_inputs`` validates like ``infer``."""
    return np.broadcast_to(np.zeros((), dtype), tuple(int(d) for d in shape))


def _nbytes(shape: tuple, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


class InferHandle:
    """A call started by :meth:`TrtRunner.infer_async`; :meth:`wait` returns its outputs."""

    def __init__(self, runner: "TrtRunner", bucket: _Bucket, copy_outputs: bool):
        self._runner = runner
        self._bucket = bucket
        self._copy = copy_outputs
        self._result: Any = None  # the outputs, once collected

    def done(self) -> bool:
        """True when the GPU has finished this call (never blocks)."""
        return self._result is not None or self._runner.cuda.event_query(self._runner._held.done_event)

    def wait(self) -> dict:
        """Block until the call has finished; return its outputs (same form as :meth:`TrtRunner.infer`)."""
        if self._result is None:
            with self._runner._lock:
                self._runner._complete(self)
        return self._result


class TrtRunner:
    """Runs one TensorRT engine on one execution context and stream.

    Args:
        engine: an engine file path, engine bytes, or a loaded ``trt.ICudaEngine``.
        profile: the optimization profile this runner uses.
        cuda_graph: capture each input-shape bucket (copies included) into a CUDA graph and replay it (default);
            False enqueues every call.
        device_outputs: return outputs as :class:`DeviceArray` views of the runner's device buffers (valid until
            the next call; copy them, e.g. with CuPy or torch, to keep them) instead of numpy arrays.
        copy_outputs: return fresh numpy arrays (True) or views into the pinned buffers, overwritten by the next
            call (False).
        pin_reused_inputs: page-lock a numpy input array (64 KiB or more, C-contiguous) in place the second time
            ``infer`` is given that very array, and transfer it from where it is from then on, with no copy into the
            pinned buffer (up to 8 arrays per runner, each only while it lives; see :mod:`trtkit.runtime.reuse`).
            ``infer_async`` always copies.
        stream: run on this CUDA stream (an int handle) instead of a stream of the runner's own.
        check_manifest: compare an engine file's manifest with this machine before loading it.
        allow_mismatch: load even if the manifest names another TensorRT version or GPU.
        plugins: paths of plugin libraries (``.so``) the engine's plugin layers come from, loaded into this process
            before the engine (:func:`~trtkit.runtime.engine.load_plugin_libraries`).
        trt: the ``tensorrt`` module (tests pass a fake).
        cuda: a :class:`~trtkit.runtime.cuda.Cuda` (tests pass one over a fake runtime).
    """

    def __init__(
        self,
        engine,
        *,
        profile: int = 0,
        cuda_graph: bool = True,
        device_outputs: bool = False,
        copy_outputs: bool = True,
        pin_reused_inputs: bool = True,
        stream: int | None = None,
        check_manifest: bool = True,
        allow_mismatch: bool = False,
        plugins=(),
        trt=None,
        cuda=None,
    ):
        from trtkit import _check

        if not isinstance(engine, (str, os.PathLike, bytes, bytearray, memoryview)) and not hasattr(
            engine, "create_execution_context"
        ):
            _check.fail("engine", engine, "an engine file path, the engine's bytes or a trt.ICudaEngine")
        self._settings = _Settings(
            engine,
            _check.integer("stream", stream, low=0, optional=True),
            _check.boolean("check_manifest", check_manifest),
            _check.boolean("allow_mismatch", allow_mismatch),
            _check.boolean("pin_reused_inputs", pin_reused_inputs),
            _check.paths("plugins", plugins),
        )
        self.profile = _check.integer("profile", profile, low=0)
        self.cuda_graph = _check.boolean("cuda_graph", cuda_graph)
        self.device_outputs = _check.boolean("device_outputs", device_outputs)
        self.copy_outputs = _check.boolean("copy_outputs", copy_outputs)
        self._trt = trt
        self.cuda = cuda
        self.active = False
        self._lock = threading.RLock()
        self._reset_state()

    def _reset_state(self) -> None:
        self.context: Any = None  # before the engine it was created from
        self.engine: Any = None
        self.stream: Any = None
        self._held = _Held()
        self._model_dtypes: ModelDtypes | None = None  # the model's own I/O dtypes where the engine's differ
        self._io = _IoState()
        self._graphs = GraphCache()  # graphs, shortcuts, page-locked arrays and counters: made anew on activation
        self._pending: InferHandle | None = None
        self.input_specs: tuple = ()
        self.output_specs: tuple = ()

    # --- lifecycle -----------------------------------------------------------------------------------------------

    def __enter__(self) -> "TrtRunner":
        self.activate()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def activate(self) -> "TrtRunner":
        """Allocate everything (called by ``with``); a no-op when already active.

        Raises:
            EngineError: the engine cannot be loaded, the profile does not exist or cannot be selected.
            CudaError: a CUDA allocation failed.
        """
        if self.active:
            return self
        try:
            self._allocate()
        except BaseException:
            try:
                self._release()
            except Exception:  # noqa: BLE001 - the allocation error is the one to report
                logger.debug("freeing a partly activated TrtRunner failed too", exc_info=True)
            raise
        self.active = True
        return self

    def close(self) -> None:
        """Wait for pending work, then free the context, stream, buffers and graphs (idempotent)."""
        with self._lock:
            try:
                if self.active:
                    self._complete_pending()  # its handle keeps its outputs
                    self.cuda.stream_synchronize(self.stream)
            finally:
                self.active = False
                self._release()

    def __del__(self):
        if getattr(self, "active", False):
            warnings.warn(
                "TrtRunner was not closed: its GPU memory stays allocated until the process ends; "
                "use `with TrtRunner(...) as runner:` or call close()",
                ResourceWarning,
                stacklevel=2,
            )

    def _allocate(self) -> None:
        source = self._settings.source
        if isinstance(source, (str, os.PathLike)):
            check_engine_file(source)  # names a missing, empty or wrong file before TensorRT is even needed
        if self._trt is None:
            self._trt = tensorrt()
        self.cuda = self.cuda or default_cuda()
        self.engine = self._load()
        manifest = engine_manifest(self._settings.source)
        self._model_dtypes = ModelDtypes.from_manifest(manifest)
        specs = with_manifest_values(io_specs(self.engine, self._trt), manifest)
        self.input_specs = tuple(s for s in specs.values() if s.is_input and not s.is_shape_tensor)
        self._io.shape_specs = tuple(s for s in specs.values() if s.is_shape_tensor)
        self.output_specs = tuple(s for s in specs.values() if not s.is_input)
        self._check_shape_tensors()
        self._io.index = {s.name: i for i, s in enumerate(self.input_specs)}
        self._check_profile_index()
        self._open_stream()
        self._graphs = GraphCache(
            self.cuda,
            self.stream,
            self._held.wait_event,
            self.input_specs,
            self._io.buckets,
            copy_into,
            self._settings.pin_reused,
        )
        self._create_context()
        self._allocate_buffers()

    def _load(self):
        settings = self._settings
        source = settings.source
        if isinstance(source, (str, os.PathLike)):
            return load_engine(
                source,
                check_manifest=settings.check_manifest,
                allow_mismatch=settings.allow_mismatch,
                plugins=settings.plugins,
                trt=self._trt,
            )
        if isinstance(source, (bytes, bytearray, memoryview)):
            return deserialize(bytes(source), trt=self._trt, plugins=settings.plugins)
        if not hasattr(source, "num_io_tensors"):
            raise EngineError(
                f"TrtRunner expects an engine path, engine bytes or a loaded engine, got {type(source).__name__}"
            )
        return source

    def _check_shape_tensors(self) -> None:
        """Refuse shape-tensor outputs (TensorRT writes them to host memory) and shape-tensor inputs whose profile
        values TensorRT does not report in full; say that graphs are off for engines with shape-tensor inputs."""
        host_outputs = [s.name for s in self.output_specs if self.engine.is_shape_inference_io(s.name)]
        if host_outputs:
            raise UnsupportedError(
                f"Output(s) {host_outputs} of this engine are shape tensors, which TensorRT writes to host memory; "
                f"TrtRunner runs engines whose outputs are device tensors (make them ordinary outputs in the model)"
            )
        for spec in self.shape_input_specs:
            count = int(np.prod(spec.shape, dtype=np.int64))
            wrong = [(p, len(v[0])) for p, v in enumerate(spec.values) if any(len(x) != count for x in v)]
            if wrong:
                profile, found = wrong[0]
                raise UnsupportedError(
                    f"Shape-tensor input '{spec.name}' (shape {tuple(spec.shape)}: {count} value(s)) has {found} "
                    f"min/opt/max value(s) in profile {profile} as TensorRT reports them (TensorRT 8.6 reports none "
                    f"for a 0-d shape tensor) and no manifest beside the engine gives them, so the runner cannot "
                    f"size its outputs; load the engine from its file with its manifest, or give the model this "
                    f"input as a 1-D tensor of {count} element(s) (a Reshape inside the model makes it 0-d again)"
                )
        if self.cuda_graph and self.shape_input_specs:
            names = [s.name for s in self.shape_input_specs]
            logger.info(
                "Running without CUDA graphs: this engine has shape-tensor input(s) %s, whose values TensorRT reads "
                "on the host while enqueueing, so a captured graph would replay stale values",
                names,
            )

    @property
    def shape_input_specs(self) -> tuple:
        """The engine's shape-tensor inputs (their values are given in the feed, on the host; not in
        :attr:`input_specs`, which lists the device-resident inputs)."""
        return self._io.shape_specs

    @property
    def _graphs_on(self) -> bool:
        return self.cuda_graph and not self.shape_input_specs

    def _check_profile_index(self) -> None:
        count = self.engine.num_optimization_profiles
        if not 0 <= self.profile < count:
            raise EngineError(
                f"Profile {self.profile} does not exist: the engine has {count} optimization "
                f"profile(s), numbered 0 to {count - 1}"
            )

    def _open_stream(self) -> None:
        if self._settings.stream is not None:
            self.stream = int(self._settings.stream)
        else:
            self.stream, self._held.own_stream = self.cuda.stream_create(), True
        self._held.done_event = self.cuda.event_create(timing=False)
        self._held.wait_event = self.cuda.event_create(timing=False)

    def _create_context(self) -> None:
        shared = compat.contexts_share_profiles(self._trt)
        key = (id(self.engine), self.profile)
        if not shared and key in _PROFILES_IN_USE:
            raise EngineError(
                f"Another TrtRunner already uses profile {self.profile} of this loaded engine.{self._sharing_hint()} "
                f"give each runner its own engine (pass the engine path or bytes rather than a loaded engine) or use "
                f"another profile"
            )
        _, trt_logger = shared_runtime(self._trt)
        seen = len(trt_logger.messages)
        self.context = compat.create_execution_context(self._trt, self.engine)
        if self.context is None:
            reasons = [msg for sev, msg in trt_logger.messages[seen:] if sev in ("ERROR", "INTERNAL_ERROR")]
            said = (
                f": TensorRT said {reasons[-1]!r}"
                if reasons
                else " (TensorRT gave no reason; most often: out of device memory)"
            )
            raise EngineError(f"TensorRT could not create an execution context{said}")
        if not shared:
            _PROFILES_IN_USE.add(key)
            self._held.profile_key = key
        if getattr(self.context, "active_optimization_profile", None) == self.profile:
            return
        if not self.context.set_optimization_profile_async(self.profile, self.stream):
            raise EngineError(
                f"Could not select optimization profile {self.profile} for a new execution context: another "
                f"context of this engine probably uses it.{self._sharing_hint()} give each runner its own engine "
                f"(pass the engine path or bytes rather than a loaded engine) or use another profile"
            )

    def _sharing_hint(self) -> str:
        if compat.contexts_share_profiles(self._trt):
            return ""
        return (
            " TensorRT 8.6 contexts cannot share a profile (trtkit does not rely on "
            "PreviewFeature.PROFILE_SHARING_0806);"
        )

    def _allocate_buffers(self) -> None:
        held = self._held
        for spec in self.shape_input_specs:
            held.shape_host[spec.name] = np.zeros(spec.shape, spec.dtype)
        max_key = tuple(s.profile_range(self.profile)[2] for s in self.input_specs)
        out_max = self._sizing_shapes(max_key)
        for spec, shape in zip(self.input_specs, max_key):
            nbytes = _nbytes(shape, spec.dtype)
            held.dev_in.append(DeviceBuffer(self.cuda, nbytes))
            held.host_in.append(HostBuffer(self.cuda, nbytes))
        for spec, shape in zip(self.output_specs, out_max):
            nbytes = _nbytes(shape, spec.dtype)
            held.dev_out.append(DeviceBuffer(self.cuda, nbytes))
            held.host_out.append(HostBuffer(self.cuda, nbytes))
        for spec, buf in zip(self.input_specs + self.output_specs, held.dev_in + held.dev_out):
            self._bind(spec.name, buf.ptr)
        self.cuda.stream_synchronize(self.stream)  # profile selection is asynchronous

    def _sizing_shapes(self, max_key: tuple) -> tuple:
        """The output shapes to size the output buffers with: at the profile's max input shapes and, for shape-tensor
        inputs, their max values, else their opt values (max values need not make a valid shape together: a Reshape's
        elementwise max has more elements than its input); buffers grow later if a call needs more."""
        if not self.shape_input_specs:
            return self._set_context_shapes(max_key)
        refused = None
        for which in (2, 1):
            for spec in self.shape_input_specs:
                self._write_shape_values(spec, spec.values[self.profile][which])
            try:
                return self._set_context_shapes(max_key)
            except InputError as exc:
                refused = exc
        raise UnsupportedError(
            f"{refused}; the runner sizes its output buffers at the profile's max (else opt) shape-tensor values, "
            f"so at least the opt values must make a valid shape"
        )

    def _grow_outputs(self, out_shapes: tuple) -> None:
        """Give each output a buffer large enough for ``out_shapes`` (engines with shape-tensor inputs, whose output
        sizes follow their values); buckets viewing the old buffers are dropped. Graphs are off for such engines, so
        no graph holds the old addresses."""
        held = self._held
        grown = False
        for i, (spec, shape) in enumerate(zip(self.output_specs, out_shapes)):
            nbytes = _nbytes(shape, spec.dtype)
            if nbytes <= held.dev_out[i].nbytes:
                continue
            if not grown:
                self._complete_pending()  # its outputs are read from the old buffers
                self.cuda.stream_synchronize(self.stream)
                grown = True
            held.dev_out[i].free()
            held.host_out[i].free()
            held.dev_out[i] = DeviceBuffer(self.cuda, nbytes)
            held.host_out[i] = HostBuffer(self.cuda, nbytes)
            self._bind(spec.name, held.dev_out[i].ptr)
        if grown:
            self._io.buckets.clear()

    def _release(self) -> None:
        """Free whatever was allocated, in reverse order; keep going if one step fails, raise the first error."""
        errors = []
        held = self._held
        # graphs, then page-locked arrays: after close() synchronized, nothing reads them any more
        steps: list = [self._graphs.clear]
        steps += [buf.free for buf in held.host_out + held.host_in + held.dev_out + held.dev_in]
        steps += [lambda e=e: self.cuda.event_destroy(e) for e in (held.done_event, held.wait_event) if e]
        if held.own_stream and self.stream is not None:
            steps.append(lambda s=self.stream: self.cuda.stream_destroy(s))
        for step in steps:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - free the rest first
                errors.append(exc)
        _PROFILES_IN_USE.discard(held.profile_key)
        self._reset_state()
        if errors:
            raise errors[0]

    # --- the public calls ----------------------------------------------------------------------------------------

    def infer(self, feed: Mapping, *, copy_outputs: bool | None = None) -> dict:
        """Run the engine on ``feed`` and return its outputs.

        Args:
            feed: input name → numpy array, or a device array exposing ``__cuda_array_interface__``.
            copy_outputs: override the runner's ``copy_outputs`` for this call.

        Returns:
            Output name → numpy array (or :class:`DeviceArray` with ``device_outputs=True``).

        Raises:
            InputError: an input is missing, unknown, of the wrong dtype or outside the profile (nothing enqueued).
            EngineError: TensorRT refused a shape or failed to enqueue.
            CudaError: a CUDA call failed.
        """
        copy = self.copy_outputs if copy_outputs is None else copy_outputs
        with self._lock:
            if not self.active:
                self._require_active()
            if self._pending is not None:
                self._complete(self._pending)
            feed = self._engine_feed(feed)
            graphs = self._graphs
            bucket = graphs.replay_host(feed, True) or graphs.replay_device(feed) or self._enqueue(feed, True)
            self.cuda.stream_synchronize(self.stream)
            return self._collect(bucket, copy)

    def _engine_feed(self, feed: Mapping) -> Mapping:
        """``feed`` as the engine takes it: the model's dtypes converted where the engine's differ, shape-tensor
        values taken into the runner's host memory (each step only for engines that need it)."""
        if self._model_dtypes is not None:
            feed = self._model_dtypes.to_engine(feed, self.input_specs + self.shape_input_specs)
        if self._io.shape_specs:
            feed = self._take_shape_values(feed)
        return feed

    def infer_async(self, feed: Mapping, *, copy_outputs: bool = True) -> InferHandle:
        """Start a call and return at once; ``handle.wait()`` returns the outputs.

        One call is in flight per runner: starting another first finishes the previous one (its handle still
        returns its outputs). Use several runners (each its own stream) to overlap calls.
        """
        with self._lock:
            self._require_active()
            self._complete_pending()
            feed = self._engine_feed(feed)
            graphs = self._graphs
            bucket = graphs.replay_host(feed, False) or graphs.replay_device(feed) or self._enqueue(feed, False)
            self.cuda.event_record(self._held.done_event, self.stream)
            self._pending = InferHandle(self, bucket, copy_outputs)
            return self._pending

    @property
    def pin_reused_inputs(self) -> bool:
        """Whether numpy arrays passed again are page-locked in place (settable while active: switching it off
        unregisters every array and drops the graphs that read them)."""
        return self._settings.pin_reused

    @pin_reused_inputs.setter
    def pin_reused_inputs(self, value: bool) -> None:
        from trtkit import _check

        value = _check.boolean("pin_reused_inputs", value)
        with self._lock:
            self._settings.pin_reused = value
            if not self.active:
                return
            if not value:
                self._complete_pending()
                self.cuda.stream_synchronize(self.stream)
            self._graphs.page_lock(value)

    def stats(self) -> RunnerStats:
        """What this runner has done since it was activated: calls by the path they took, graphs held, arrays
        page-locked (all zero while inactive)."""
        with self._lock:
            g = self._graphs
            return RunnerStats(
                calls=g.calls,
                host_replays=g.host_replays,
                device_replays=g.device_replays,
                graph_replays=g.graph_replays,
                captures=g.captures,
                enqueues=g.enqueues,
                graphs=len(g),
                address_graphs=g.address_graphs,
                buckets=len(self._io.buckets),
                arrays_page_locked=g.page_locked,
                page_locking=g.page_locking,
            )

    def graphs(self) -> dict[GraphKey, CudaGraph]:
        """The CUDA graphs this runner holds, by key (still the runner's: valid until it closes or drops them)."""
        with self._lock:
            return self._graphs.graphs()

    def _require_active(self) -> None:
        if not self.active:
            raise EngineError(
                "TrtRunner is not active: use it inside `with TrtRunner(...) as runner:` (or call activate())"
            )

    def _complete(self, handle: InferHandle) -> None:
        if handle._result is None:
            self.cuda.event_synchronize(self._held.done_event)
            handle._result = self._collect(handle._bucket, handle._copy)
            if self._pending is handle:
                self._pending = None

    def _complete_pending(self) -> None:
        if self._pending is not None:
            self._complete(self._pending)

    def _validate(self, feed) -> list:
        return validate_feed(feed, self.input_specs, self._io.index, self.profile, self._io.known_shapes)

    # --- shape-tensor inputs: values in host memory --------------------------------------------------------------

    def _take_shape_values(self, feed):
        """``feed`` without its shape-tensor inputs, whose values are checked and, where they changed, written into
        the runner's host buffers (the buckets, made at the old values, are dropped)."""
        specs = self.shape_input_specs
        if not isinstance(feed, Mapping):
            return feed  # validate_feed explains
        missing = [s.name for s in specs if s.name not in feed]
        if missing:
            names = ", ".join(f"'{s.name}'" for s in self.input_specs + specs)
            raise InputError(
                f"Missing shape-tensor input(s) {', '.join(repr(n) for n in missing)} (give their values as numpy "
                f"arrays); the engine's inputs are {names}"
            )
        values = [check_shape_values(spec, feed[spec.name], self.profile) for spec in specs]
        for spec, found in zip(specs, values):
            if self._io.values.get(spec.name) != found:
                self._write_shape_values(spec, found)
        return {name: value for name, value in feed.items() if name not in self._io.values}

    def _write_shape_values(self, spec, values) -> None:
        """Put ``values`` in the host buffer of shape-tensor input ``spec`` and bind it again, so TensorRT reads
        them; the buckets (output shapes at the old values) are dropped."""
        host = self._held.shape_host[spec.name]
        host.reshape(-1)[...] = np.asarray(values, spec.dtype)
        if not self.context.set_tensor_address(spec.name, host.ctypes.data):
            raise EngineError(f"TensorRT refused the host address of shape-tensor input '{spec.name}'")
        self._io.bound[spec.name] = host.ctypes.data
        self._io.values[spec.name] = tuple(values)
        self._io.buckets.clear()
        self._io.shapes = None

    # --- shapes and bindings -------------------------------------------------------------------------------------

    def _set_context_shapes(self, key: tuple) -> tuple:
        """Set the context's input shapes to ``key`` (only those that changed); return the output shapes."""
        previous = self._io.shapes or (None,) * len(key)
        for spec, shape, old in zip(self.input_specs, key, previous):
            if shape != old and not self.context.set_input_shape(spec.name, shape):
                self._io.shapes = None
                hint = self._sharing_hint()
                raise EngineError(
                    f"TensorRT refused shape {shape} for input '{spec.name}' (profile "
                    f"{self.profile}: {spec.profile_range(self.profile)})."
                    + (f" If another context uses this profile:{hint} give each runner its own engine" if hint else "")
                )
        self._io.shapes = key
        out_shapes = tuple(tuple(int(d) for d in self.context.get_tensor_shape(s.name)) for s in self.output_specs)
        for spec, shape in zip(self.output_specs, out_shapes):
            if any(d < 0 for d in shape) and self._io.values:
                raise InputError(
                    f"TensorRT could not compute the shape of output '{spec.name}' at input shapes {key} and "
                    f"shape-tensor values {self._io.values}: within the profile, but not a valid shape for the "
                    f"model (its TensorRT log says why)"
                )
            if any(d < 0 for d in shape):
                raise UnsupportedError(
                    f"Output '{spec.name}' has a data-dependent shape {shape}; TrtRunner needs "
                    f"output shapes known from the input shapes"
                )
        return out_shapes

    def _bucket(self, key: tuple) -> _Bucket:
        io = self._io
        bucket = io.buckets.get(key)
        if bucket is None:
            out_shapes = self._set_context_shapes(key)
            if self.shape_input_specs:
                self._grow_outputs(out_shapes)
            bucket = _Bucket(self, key, out_shapes)
            for spec, nbytes, buf in zip(self.output_specs, bucket.out_nbytes, self._held.dev_out):
                if nbytes > buf.nbytes:
                    raise UnsupportedError(
                        f"Output '{spec.name}' needs {nbytes} bytes at input shapes {key}, "
                        f"more than at the profile's max shapes ({buf.nbytes})"
                    )
            io.buckets[key] = bucket
        elif io.shapes != key:
            self._set_context_shapes(key)
        return bucket

    def _bind(self, name: str, ptr: int) -> None:
        bound = self._io.bound
        if bound.get(name) != ptr:
            if not self.context.set_tensor_address(name, ptr):
                raise EngineError(f"TensorRT refused the address of tensor '{name}'")
            bound[name] = ptr

    # --- enqueue -------------------------------------------------------------------------------------------------

    def _enqueue(self, feed, reuse: bool) -> _Bucket:
        """The general path: validate, set shapes, place every input, then replay, capture or enqueue the call."""
        prepared = self._validate(feed)
        key = tuple(dev.shape if dev is not None else array.shape for array, dev in prepared)
        bucket = self._bucket(key)
        sources: list = list(bucket.pinned_sources)
        devices = []
        for i, (array, dev) in enumerate(prepared):
            if dev is not None:
                self._wait_for_producer(dev)
                devices.append((i, dev))
                sources[i] = None
            elif array is bucket.in_views[i]:  # a view from host_inputs(): already in place
                pass
            elif (locked := self._locked(array, feed, i, reuse)) is not None:
                sources[i] = (locked.serial, locked.ptr)
            elif bucket.via_pinned[i]:
                copy_into(bucket.in_views[i], array)
            else:
                self._transfer_directly(i, array, bucket)
                sources[i] = None
        addresses = self._place_device_inputs(devices, bucket, tuple(sources)) if devices else ()
        self._launch(bucket, tuple(sources), not self.device_outputs, addresses)
        return bucket

    def _locked(self, array: np.ndarray, feed, i: int, reuse: bool):
        """The registration of ``array`` if it is (now) page-locked in place; None to copy it."""
        if not reuse or type(array) is not np.ndarray:
            return None
        if feed[self.input_specs[i].name] is not array:  # converted from a list or the like: a temporary
            return None
        return self._graphs.locked(array)

    def _transfer_directly(self, i: int, array: np.ndarray, bucket: _Bucket) -> None:
        """H2D from the caller's memory; CUDA stages pageable memory before returning, so ``array`` may change
        afterwards."""
        dev = self._held.dev_in[i]
        self._bind(self.input_specs[i].name, dev.ptr)
        if bucket.in_nbytes[i]:
            source = np.ascontiguousarray(array)
            self.cuda.memcpy_htod_async(dev.ptr, source.ctypes.data, bucket.in_nbytes[i], self.stream)

    def _wait_for_producer(self, dev) -> None:
        """Order our stream after the stream the device array was produced on (``__cuda_array_interface__`` v3)."""
        if dev.stream is not None:
            self.cuda.event_record(self._held.wait_event, int(dev.stream))
            self.cuda.stream_wait_event(self.stream, self._held.wait_event)

    def _place_device_inputs(self, devices: list, bucket: _Bucket, sources: tuple) -> tuple:
        """Bind device inputs where they are (no copy), or copy them into the runner's buffers.

        Without graphs they are always bound in place. A graph bakes addresses in, so with graphs each set of input
        addresses gets its own graph, up to ``MAX_ADDRESS_GRAPHS``; past that, new addresses are copied on the
        device into the runner's buffers and share one graph per shape.

        Returns:
            The addresses to key the graph with (empty when copied).
        """
        addresses = tuple(dev.ptr for _, dev in devices)
        in_place = not self._graphs_on or self._graphs.binds_in_place(
            (bucket.key, sources, not self.device_outputs, addresses), MAX_ADDRESS_GRAPHS
        )
        for i, dev in devices:
            own = self._held.dev_in[i].ptr
            self._bind(self.input_specs[i].name, dev.ptr if in_place else own)
            if not in_place and bucket.in_nbytes[i]:
                self.cuda.memcpy_dtod_async(own, dev.ptr, bucket.in_nbytes[i], self.stream)
        return addresses if in_place else ()

    def _launch(
        self, bucket: _Bucket, sources: tuple, copy_out: bool, addresses: tuple = (), *, shortcut: bool = True
    ) -> None:
        """Run the call: replay its graph, or enqueue it (capturing a graph for next time); with ``shortcut``, a
        replay lets later calls like it take the shortcut of their kind."""
        if not self._graphs_on:
            self._graphs.enqueue(bucket, sources, copy_out, self._enqueue_body)
        else:
            # a GraphKey's fields, as the plain tuple equal to it (the cache makes the GraphKey when it stores one)
            self._graphs.launch((bucket.key, sources, copy_out, addresses), bucket, self._enqueue_body, shortcut)

    def _enqueue_body(self, bucket: _Bucket, sources: tuple, copy_out: bool) -> None:
        """H2D copies of host inputs, the engine, D2H copies of the outputs: what a graph captures.

        ``sources``: per input, ``(serial, host address)`` to send it from (serial 0: the runner's pinned buffer;
        else the registration of an array page-locked in place), or None when it is not sent here (device-resident,
        or sent straight from pageable memory before).
        """
        held = self._held
        for i, source in enumerate(sources):
            if source is not None:
                self._bind(self.input_specs[i].name, held.dev_in[i].ptr)
                if bucket.in_nbytes[i]:
                    self.cuda.memcpy_htod_async(held.dev_in[i].ptr, source[1], bucket.in_nbytes[i], self.stream)
        self.execute()
        if copy_out:
            for i, nbytes in enumerate(bucket.out_nbytes):
                if nbytes:
                    self.cuda.memcpy_dtoh_async(held.host_out[i].ptr, held.dev_out[i].ptr, nbytes, self.stream)

    def execute(self) -> None:
        """Enqueue the engine once on the runner's stream with the current shapes and bindings (no copies).

        Raises:
            EngineError: ``execute_async_v3`` returned False.
        """
        if not self.context.execute_async_v3(self.stream):
            raise EngineError("TensorRT's execute_async_v3 failed; see the TensorRT log above for the reason")

    def _collect(self, bucket: _Bucket, copy: bool) -> dict:
        if self.device_outputs:
            if bucket.device_views is None:
                bucket.device_views = {
                    spec.name: DeviceArray(buf.ptr, shape, spec.dtype, owner=self, cuda=self.cuda)
                    for spec, buf, shape in zip(self.output_specs, self._held.dev_out, bucket.out_shapes)
                }
            return dict(bucket.device_views)
        if copy:
            outputs = {spec.name: copy_of(view) for spec, view in zip(self.output_specs, bucket.out_views)}
        else:
            outputs = {spec.name: view for spec, view in zip(self.output_specs, bucket.out_views)}
        return outputs if self._model_dtypes is None else self._model_dtypes.to_model(outputs)

    def host_inputs(self, shapes: Mapping | None = None) -> dict:
        """Views of the runner's pinned input buffers, to fill in place and pass to :meth:`infer` (no host copy).

        Args:
            shapes: input name → shape (default: each input's opt shape in the runner's profile).

        Returns:
            Input name → numpy array in pinned memory. Passing these very arrays to ``infer`` skips the copy into
            pinned memory; they are valid until the runner closes. With ``infer_async``, wait for a call before
            refilling them.

        Raises:
            InputError: a shape is outside the profile or names an unknown input.
        """
        shapes = dict(shapes or {})
        with self._lock:
            self._require_active()
            feed = {
                s.name: _placeholder(shapes.pop(s.name, s.profile_range(self.profile)[1]), s.dtype)
                for s in self.input_specs
            }
            feed.update({name: _placeholder(shape, np.float32) for name, shape in shapes.items()})
            prepared = self._validate(feed)
            bucket = self._bucket(tuple(array.shape for array, _ in prepared))
            return {spec.name: view for spec, view in zip(self.input_specs, bucket.in_views)}

    # --- pieces for trtkit bench: stage once, then time the copies and the engine separately ---------------------

    def stage(self, feed: Mapping) -> tuple:
        """Validate ``feed``, set its shapes and copy host inputs into the pinned buffers; nothing is enqueued.

        Returns:
            The input-shape key to pass to :meth:`enqueue_h2d`, :meth:`enqueue_compute` and :meth:`enqueue_d2h`.
        """
        with self._lock:
            self._require_active()
            prepared = self._validate(self._take_shape_values(feed) if self._io.shape_specs else feed)
            if any(dev is not None for _, dev in prepared):
                raise InputError("stage() takes host (numpy) inputs only")
            bucket = self._bucket(tuple(array.shape for array, _ in prepared))
            for view, (array, _) in zip(bucket.in_views, prepared):
                copy_into(view, array)
            for spec, buf in zip(self.input_specs, self._held.dev_in):
                self._bind(spec.name, buf.ptr)
            return bucket.key

    def enqueue_h2d(self, key: tuple) -> None:
        """Enqueue the copies of the staged inputs to the device."""
        bucket = self._io.buckets[key]
        for dev, host, nbytes in zip(self._held.dev_in, self._held.host_in, bucket.in_nbytes):
            if nbytes:
                self.cuda.memcpy_htod_async(dev.ptr, host.ptr, nbytes, self.stream)

    def enqueue_compute(self, key: tuple) -> None:
        """Enqueue the engine alone (its CUDA graph without copies when ``cuda_graph``)."""
        bucket = self._io.buckets[key]
        if self._io.shapes != key:
            self._set_context_shapes(key)
        self._launch(bucket, (None,) * len(self.input_specs), False, shortcut=False)

    def enqueue_d2h(self, key: tuple) -> None:
        """Enqueue the copies of the outputs to the pinned host buffers."""
        bucket = self._io.buckets[key]
        for dev, host, nbytes in zip(self._held.dev_out, self._held.host_out, bucket.out_nbytes):
            if nbytes:
                self.cuda.memcpy_dtoh_async(host.ptr, dev.ptr, nbytes, self.stream)

    def synchronize(self) -> None:
        """Wait for everything enqueued on the runner's stream."""
        self.cuda.stream_synchronize(self.stream)

    def __repr__(self) -> str:
        state = "active" if self.active else "inactive"
        return (
            f"TrtRunner({self._settings.source!r:.60}, profile={self.profile}, cuda_graph={self.cuda_graph}, {state})"
        )
