"""The scoreboard: the installed onnx wheel's backend test data through TensorRT, raw API against trtkit.

Every case of the node, simple, real, pytorch-converted and pytorch-operator suites is exported once (model.onnx and
its inputs/outputs as .npz, under --work-dir), then run through two adapters with the same TensorRT, the same cases
and the same tolerances (each case's rtol/atol):

- ``raw``: a minimal raw-API script: parse, build FP32 with TF32 off (TensorRT's own tactic sources), run with
  cuda-python, no conversions of its own.
- ``trtkit``: ``trtkit.build`` with the library's defaults, isolated (prepare, parse, build, and the op check after a
  failed parse, in the pool worker's warm build worker, a child process reused from case to case) then
  ``TrtRunner.infer``.

Each (case, adapter) runs in a worker process of a pool (``--jobs``); a worker that dies takes only its case with
it (``crash``), one that runs past ``--case-timeout-s`` is stopped (``timeout``); cases not reached within
``--budget-s`` are ``not_run``. Cases run in a seeded random order (``--order shuffle --seed 0``, the default), so a
run its budget cuts short has reached a sample of every suite and op; ``--order kind`` takes the suites in turn.
Each case records seconds per phase (``phases_s``; raw: parse, build, deserialize, run; trtkit: setup, load, each
``trtkit.build`` phase, write, open, infer) and the summary their medians over passing cases (``median_phases_s``).
Writes ``benchmarks/results/onnx-backend-<trt version>.json``; the documentation's benchmark pages show its per-op
table (:func:`support_markdown`), which ``--doc FILE`` also writes.

On the GPU host:  bash .gpu/bin/gpu-run python3 scripts/onnx_backend_suite.py --jobs 16 --budget-s 330
On a CPU (smoke): python scripts/onnx_backend_suite.py --fake --max-cases 3 --out /tmp/r.json --doc /tmp/s.md
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import random
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("node", "simple", "real", "pytorch-converted", "pytorch-operator")
ADAPTERS = ("raw", "trtkit")
STATUSES = ("pass", "error", "mismatch", "crash", "timeout", "not_run")
TACTIC_SOURCES = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")  # the GPU host's bundle stubs cuBLAS/cuDNN


# --- case discovery and export ---------------------------------------------------------------------------------------


def discover(kinds=KINDS, max_cases: int | None = None, names=None) -> list:
    """``[{name, kind, rtol, atol, source}]`` for every case of the installed onnx wheel (``max_cases`` per kind)."""
    import warnings

    from onnx.backend.test.loader import load_model_tests

    cases = []
    for kind in kinds:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = load_model_tests(kind=kind)
        if names:
            found = [c for c in found if c.name in names]
        for case in found[:max_cases]:
            cases.append({"name": case.name, "kind": kind, "rtol": case.rtol, "atol": case.atol, "case": case})
    return cases


def export(cases: list, work_dir: Path) -> list:
    """Write each case as ``<work>/<name>/model.onnx`` + ``data.npz``; returns plain dicts (``dir`` or ``skip``)."""
    out = []
    for item in cases:
        case = item.pop("case")
        folder = work_dir / item["name"]
        try:
            model, inputs, outputs = _case_data(case)
        except Exception as exc:  # noqa: BLE001 - a case we cannot read is reported, not fatal
            out.append({**item, "skip": f"cannot export: {type(exc).__name__}: {exc}"[:300]})
            continue
        if model is None:
            out.append({**item, "skip": inputs})
            continue
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.onnx").write_bytes(model.SerializeToString())
        _save_arrays(folder / "data.npz", inputs, outputs)
        out.append({**item, "dir": str(folder), "ops": sorted({n.op_type for n in model.graph.node})})
    return out


def _case_data(case):
    """``(model, {input: array}, {output: array})``, or ``(None, reason, None)`` for cases with no tensor data."""
    import glob

    import onnx
    from onnx import numpy_helper

    if case.model is not None:  # node cases: generated in memory by onnx
        model = case.model
        if not case.data_sets:
            return None, "no test data", None
        ins, outs = case.data_sets[0]
        return model, _named(_graph_inputs(model), ins), _named([o.name for o in model.graph.output], outs)
    if case.url and "data/light/" in case.url:  # real cases: onnx's "light" models, inputs made as onnx's runner does
        from onnx.backend.test.runner import Runner

        path = Path(onnx.__file__).parent.parent / case.url
        model = onnx.load(str(path))
        inits = {i.name for i in model.graph.initializer}
        inputs = {v.name: Runner.generate_dummy_data(v, seed=0, name=case.model_name, random=False)
                  for v in model.graph.input if v.name not in inits}
        expected = Path(str(path)[: -len(".onnx")] + "_output_0.pb")
        if not expected.exists():
            return None, "no expected output stored with the light model", None
        return model, inputs, {model.graph.output[0].name: _tensor(expected)}
    if case.model_dir is None:
        return None, "needs a download (no network here)", None
    model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
    sets = sorted(glob.glob(os.path.join(case.model_dir, "test_data_set*")))
    if not sets:
        return None, "no test data", None
    ins = [_tensor(p) for p in sorted(glob.glob(os.path.join(sets[0], "input_*.pb")), key=_index)]
    outs = [_tensor(p) for p in sorted(glob.glob(os.path.join(sets[0], "output_*.pb")), key=_index)]
    del numpy_helper
    return model, _named(_graph_inputs(model), ins), _named([o.name for o in model.graph.output], outs)


def _index(path: str) -> int:
    return int(Path(path).stem.split("_")[-1])


def _tensor(path):
    import onnx
    from onnx import numpy_helper

    tensor = onnx.TensorProto()
    tensor.ParseFromString(Path(path).read_bytes())
    return numpy_helper.to_array(tensor)


def _graph_inputs(model) -> list:
    inits = {i.name for i in model.graph.initializer}
    return [v.name for v in model.graph.input if v.name not in inits]


def _named(names, arrays) -> dict:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    values = {}
    for name, value in zip(names, arrays):
        if isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        elif isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray) or value.dtype == object:
            raise TypeError(f"'{name}' is not a numeric tensor ({type(value).__name__})")
        values[name] = value
    return values


def _save_arrays(path: Path, inputs: dict, outputs: dict) -> None:
    """``data.npz`` and ``names.json``; arrays of ml_dtypes' types (FLOAT8*, INT4, BFLOAT16: npz cannot read them
    back) are stored as their raw bytes, with the type's name in ``names.json``."""
    import numpy as np

    arrays = {f"in{i}": v for i, v in enumerate(inputs.values())}
    arrays.update({f"out{i}": v for i, v in enumerate(outputs.values())})
    extended = {k: v.dtype.name for k, v in arrays.items() if v.dtype.type.__module__.startswith("ml_dtypes")}
    arrays = {k: (v.view(np.dtype(f"u{v.dtype.itemsize}")) if k in extended else v) for k, v in arrays.items()}
    np.savez(path, **arrays)
    (path.parent / "names.json").write_text(json.dumps({"inputs": list(inputs), "outputs": list(outputs),
                                                        "ml_dtypes": extended}))


def load_arrays(folder: Path) -> tuple:
    import numpy as np

    names = json.loads((folder / "names.json").read_text())
    data = np.load(folder / "data.npz", allow_pickle=False)
    extended = names.get("ml_dtypes", {})
    if extended:
        import ml_dtypes

    def get(key):
        return data[key].view(getattr(ml_dtypes, extended[key])) if key in extended else data[key]

    inputs = {n: get(f"in{i}") for i, n in enumerate(names["inputs"])}
    outputs = {n: get(f"out{i}") for i, n in enumerate(names["outputs"])}
    return inputs, outputs


# --- adapters (run in a worker) --------------------------------------------------------------------------------------


class CaseError(Exception):
    """The adapter could not build or run the case (the message says where)."""


class PhaseClock:
    """Seconds per named phase of one case into ``phases`` (``{name: s}``); a phase ends where the next starts."""

    def __init__(self, phases: dict):
        self.phases = phases
        self._current = None

    def start(self, name: str) -> None:
        now = time.perf_counter()
        self.stop(now)
        self._current = (name, now)

    def stop(self, now: float | None = None) -> None:
        if self._current is not None:
            name, since = self._current
            self.phases[name] = round(self.phases.get(name, 0.0) + (now or time.perf_counter()) - since, 4)
            self._current = None


def run_raw(model_path: Path, inputs: dict, trt, cudart, clock: PhaseClock | None = None,
            opt_level: int | None = None) -> dict:
    """Parse, build FP32 (TF32 off; at builder optimization level ``opt_level`` when given), run: the raw TensorRT
    API and cuda-python, nothing else."""
    import numpy as np

    clock = clock or PhaseClock({})
    clock.start("parse")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
    network = builder.create_network(0 if flags is None else 1 << int(flags))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(model_path.read_bytes(), str(model_path)):
        errors = [parser.get_error(i) for i in range(parser.num_errors)]
        raise CaseError("parse: " + "; ".join(_error_text(e) for e in errors[:3]))
    clock.start("build")
    config = builder.create_builder_config()
    if hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)
    if opt_level is not None:
        config.builder_optimization_level = opt_level
    config.set_tactic_sources(sum(1 << int(getattr(trt.TacticSource, s)) for s in TACTIC_SOURCES
                                  if hasattr(trt.TacticSource, s)))
    profile = builder.create_optimization_profile()
    dynamic = False
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        if any(d < 0 for d in tensor.shape) and tensor.name in inputs:
            shape = inputs[tensor.name].shape
            profile.set_shape(tensor.name, shape, shape, shape)
            dynamic = True
    if dynamic:
        config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise CaseError("build: build_serialized_network returned None")
    clock.start("deserialize")
    engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
    context = engine.create_execution_context()
    clock.start("run")
    _, stream = cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking)
    buffers, outputs, host = [], {}, {}
    try:
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                value = inputs[name]
                if value.dtype != dtype:
                    raise CaseError(f"run: input '{name}' is {value.dtype} in the model, {dtype} in the engine")
                host[name] = np.ascontiguousarray(value)
                context.set_input_shape(name, value.shape)
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            array = host[name] if is_input else np.empty(tuple(context.get_tensor_shape(name)), dtype=dtype)
            err, ptr = cudart.cudaMalloc(max(array.nbytes, 1))
            buffers.append(ptr)
            if is_input:
                cudart.cudaMemcpyAsync(ptr, array.ctypes.data, array.nbytes,
                                       cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, stream)
            else:
                outputs[name] = (array, ptr)
            context.set_tensor_address(name, int(ptr))
        if not context.execute_async_v3(int(stream)):
            raise CaseError("run: execute_async_v3 returned False")
        for array, ptr in outputs.values():
            cudart.cudaMemcpyAsync(array.ctypes.data, ptr, array.nbytes,
                                   cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream)
        cudart.cudaStreamSynchronize(stream)
    finally:
        for ptr in buffers:
            cudart.cudaFree(ptr)
        cudart.cudaStreamDestroy(stream)
        clock.stop()
    return {name: array for name, (array, _) in outputs.items()}


def _error_text(error) -> str:
    desc = error.desc() if callable(getattr(error, "desc", None)) else str(error)
    node = error.node() if callable(getattr(error, "node", None)) else -1
    return f"node {node}: {desc}"


def run_trtkit(model_path: Path, inputs: dict, trt, cuda, clock: PhaseClock | None = None) -> dict:
    """``trtkit.build`` as a user calls it (isolated: in this worker's warm build worker), the engine and manifest
    written, then ``TrtRunner.infer``; ``load`` is ``trtkit.build``'s own checks (and, in a worker's first case, the
    build worker's start) before its first phase."""
    import trtkit
    from trtkit.builder import BuildConfig, shape_tensor_inputs
    from trtkit.builder.api import save
    from trtkit.builder.profiles import Profile
    from trtkit.model import load_model, model_inputs

    clock = clock or PhaseClock({})
    clock.start("setup")
    declared = model_inputs(load_model(model_path, check=False).proto)
    dynamic = {n: list(v.shape) for n, v in inputs.items() if any(not isinstance(d, int) for d in declared.get(n, []))}
    # a shape tensor's profile entry is its values (the case's own), whether or not its dims are dynamic
    if any(v.dtype.kind == "i" and v.ndim <= 1 for v in inputs.values()):
        for name in shape_tensor_inputs(model_path, trt=trt):
            if name in inputs:
                dynamic[name] = [int(v) for v in inputs[name].reshape(-1)]
    profiles = [Profile.from_json({n: {"min": s, "opt": s, "max": s} for n, s in dynamic.items()})] if dynamic else []
    config = BuildConfig(tf32=False, tactic_sources=TACTIC_SOURCES, profiling_verbosity="NONE", profiles=profiles)
    engine = model_path.with_suffix(".trtkit.engine")
    clock.start("load")
    result = trtkit.build(str(model_path), config, on_phase=clock.start)
    clock.start("write")
    save(result, engine)
    clock.start("open")
    with trtkit.TrtRunner(engine, trt=trt, cuda=cuda) as runner:
        clock.start("infer")
        outputs = runner.infer(inputs)
        clock.stop()
        return outputs


def compare(outputs: dict, expected: dict, rtol: float, atol: float) -> str | None:
    """``None`` when every expected output matches (onnx's own assert_allclose rule), else what differs."""
    import numpy as np

    for name, want in expected.items():
        if name not in outputs:
            return f"output '{name}' missing"
        got = np.asarray(outputs[name])
        if got.shape != want.shape:
            return f"output '{name}': shape {got.shape}, expected {want.shape}"
        try:
            np.testing.assert_allclose(got.astype(want.dtype) if want.dtype != object else got, want,
                                       rtol=rtol, atol=atol)
        except AssertionError as exc:
            return f"output '{name}': " + " ".join(str(exc).split())[:300]
    return None


# --- the worker pool -------------------------------------------------------------------------------------------------


def _backend(fake: bool):
    if fake:
        import functools

        sys.path.insert(0, str(ROOT))  # the fakes live in tests/, outside the package
        from tests.fakes.fake_cuda import FakeCudart
        from tests.fakes.fake_trt import make_fake_trt
        from trtkit.builder import isolate
        from trtkit.runtime.cuda import Cuda

        isolate.DEFAULT_TRT_FACTORY = functools.partial(make_fake_trt, "8.6.0")  # what the build worker imports
        rt = FakeCudart()
        return make_fake_trt("8.6.0"), rt, Cuda(rt)
    import tensorrt as trt
    from cuda.bindings import runtime as cudart

    return trt, cudart, None


def _worker(tasks, results, fake: bool) -> None:
    trt, cudart, cuda = _backend(fake)
    while True:
        task = tasks.get()
        if task is None:
            return
        index, adapter, case = task
        started = time.perf_counter()
        status, error, phases = "pass", None, {}
        clock = PhaseClock(phases)
        try:
            inputs, expected = load_arrays(Path(case["dir"]))
            model = Path(case["dir"]) / "model.onnx"
            outputs = (run_raw(model, inputs, trt, cudart, clock) if adapter == "raw"
                       else run_trtkit(model, inputs, trt, cuda, clock))
            error = compare(outputs, expected, case["rtol"], case["atol"])
            status = "mismatch" if error else "pass"
        except Exception as exc:  # noqa: BLE001 - every failure is the case's result
            status, error = "error", f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:600]
            if not str(exc):
                error += " " + traceback.format_exc(limit=2)[-300:]
        clock.stop()  # a phase that raised ends here
        results.put((os.getpid(), {"status": status, "error": error, "phases_s": phases,
                                   "seconds": round(time.perf_counter() - started, 3)}))


def case_order(cases: list, order: str = "shuffle", seed: int = 0) -> list:
    """Case indices in the order they run: ``shuffle`` (seeded, a sample of every suite and op whatever the budget
    reaches) or ``kind`` (round robin over the suites, in discovery order within each)."""
    if order == "shuffle":
        indices = list(range(len(cases)))
        random.Random(seed).shuffle(indices)
        return indices
    rank: dict = {}
    keyed = []
    for i, case in enumerate(cases):
        rank[case["kind"]] = rank.get(case["kind"], -1) + 1
        keyed.append((rank[case["kind"]], KINDS.index(case["kind"]) if case["kind"] in KINDS else 99, i))
    return [i for *_, i in sorted(keyed)]


def run_pool(cases: list, adapters, jobs: int, case_timeout_s: float, budget_s: float, fake: bool,
             log=print, order: str = "shuffle", seed: int = 0) -> dict:
    """``{(case index, adapter): result}``; a worker that dies or hangs is replaced and its case marked."""
    ctx = mp.get_context("spawn")
    # both adapters of a case back to back, so a budget cut leaves no case run by one adapter only
    pending = [(i, a, cases[i]) for i in case_order(cases, order, seed) for a in adapters if "dir" in cases[i]]
    results, out = ctx.Queue(), {}
    workers: dict = {}  # pid -> (process, task queue, current task, started at)
    deadline = time.monotonic() + budget_s

    def spawn():
        tasks = ctx.Queue()
        proc = ctx.Process(target=_worker, args=(tasks, results, fake), daemon=True)
        proc.start()
        workers[proc.pid] = [proc, tasks, None, None]

    def feed(pid):
        if pending and time.monotonic() < deadline:
            task = pending.pop(0)
            workers[pid][2:] = [task, time.monotonic()]
            workers[pid][1].put(task)
        else:
            workers[pid][2] = None

    for _ in range(min(jobs, max(1, len(pending)))):
        spawn()
    for pid in list(workers):
        feed(pid)
    while any(w[2] is not None for w in workers.values()):
        try:
            pid, value = results.get(timeout=0.5)
            if pid in workers and workers[pid][2] is not None:
                index, adapter, _ = workers[pid][2]
                out[(index, adapter)] = value
                log(f"{cases[index]['name']} [{adapter}]: {value['status']} ({value['seconds']} s)")
                feed(pid)
        except queue.Empty:
            pass
        now = time.monotonic()
        for pid, (proc, _, task, since) in list(workers.items()):
            if task is None:
                continue
            died = not proc.is_alive()
            late = since is not None and now - since > case_timeout_s
            if died or late:
                if late and not died:
                    proc.kill()
                proc.join(5)
                status = "crash" if died else "timeout"
                detail = f"worker exit code {proc.exitcode}" if died else f"stopped after {case_timeout_s:.0f} s"
                out[(task[0], task[1])] = {"status": status, "error": detail, "phases_s": {},
                                           "seconds": round(now - since, 3)}
                log(f"{cases[task[0]]['name']} [{task[1]}]: {status} ({detail})")
                del workers[pid]
                spawn()
                feed(next(reversed(workers)))
    for _, tasks, _, _ in workers.values():
        tasks.put(None)
    for proc, *_ in workers.values():
        proc.join(10)
    return out


# --- reports ---------------------------------------------------------------------------------------------------------


def assemble(cases: list, results: dict, adapters, meta: dict) -> dict:
    """The results JSON: per case both adapters' status/error/seconds, and the summary the issue names."""
    per_case = {}
    for i, case in enumerate(cases):
        entry = {"kind": case["kind"], "ops": case.get("ops", [])}
        for adapter in adapters:
            default = {"status": "not_run", "error": case.get("skip") or "not reached within the time budget",
                       "seconds": None}
            entry[adapter] = results.get((i, adapter), default)
        per_case[case["name"]] = entry
    summary = {}
    for adapter in adapters:
        counts = {s: 0 for s in STATUSES}
        seconds = []
        for entry in per_case.values():
            counts[entry[adapter]["status"]] += 1
            if entry[adapter]["seconds"] is not None and entry[adapter]["status"] != "not_run":
                seconds.append(entry[adapter]["seconds"])
        counts["median_s"] = round(statistics.median(seconds), 3) if seconds else None
        both = [e[adapter]["seconds"] for e in per_case.values() if _all_passed(e, adapters)]
        counts["median_s_both_pass"] = round(statistics.median(both), 3) if both else None
        counts["median_phases_s"] = median_phases([e[adapter] for e in per_case.values()])
        summary[adapter] = counts
    summary["both_pass"] = sum(_all_passed(e, adapters) for e in per_case.values())
    return {**meta, "summary": summary, "cases": per_case}


def _all_passed(entry: dict, adapters) -> bool:
    """Every adapter passed this case: the cases on which per-case seconds compare like with like (``median_s``
    is over every case an adapter reached, where an early parse error is quick and a build that gets further is
    not)."""
    return all(entry[a]["status"] == "pass" and entry[a]["seconds"] is not None for a in adapters)


def median_phases(results: list) -> dict:
    """``{phase: median seconds}`` over the passing results that have that phase, in the order phases ran."""
    by_phase: dict = {}
    for result in results:
        if result["status"] == "pass":
            for name, seconds in (result.get("phases_s") or {}).items():
                by_phase.setdefault(name, []).append(seconds)
    return {name: round(statistics.median(values), 4) for name, values in by_phase.items()}


def support_markdown(report: dict, adapters) -> str:
    """The per-op table (Markdown): per op, how many cases use it and how many pass with each adapter."""
    ops: dict = {}
    for name, entry in report["cases"].items():
        for op in entry["ops"] or ["(none)"]:
            row = ops.setdefault(op, {"cases": 0, **{a: 0 for a in adapters}, "failure": {}})
            row["cases"] += 1
            for adapter in adapters:
                if entry[adapter]["status"] == "pass":
                    row[adapter] += 1
            last = entry[adapters[-1]]
            if last["status"] not in ("pass", "not_run"):
                row["failure"].setdefault(last["status"], name)
    lines = [f"# ONNX backend test data through TensorRT {report['tensorrt']}", "",
             f"Generated by `scripts/onnx_backend_suite.py` (onnx {report['onnx']}); cases passing per op, raw "
             "TensorRT API against trtkit (a case counts for every op it uses). Summary:", ""]
    lines += ["| adapter | " + " | ".join(STATUSES) + " | median s | median s, cases both pass |",
              "|---" * (len(STATUSES) + 3) + "|"]
    for adapter in adapters:
        s = report["summary"][adapter]
        lines.append(f"| {adapter} | " + " | ".join(str(s[k]) for k in STATUSES)
                     + f" | {s['median_s']} | {s.get('median_s_both_pass')} |")
    lines += ["", f"Cases both adapters pass: {report['summary'].get('both_pass')}. `median s` is over every case an "
              "adapter reached (a quick parse error counts as much as a full build); the last column compares the "
              "same cases."]
    lines += ["", "Median seconds per phase over passing cases:", ""]
    for adapter in adapters:
        phases = report["summary"][adapter].get("median_phases_s") or {}
        lines.append(f"- {adapter}: " + (", ".join(f"{k} {v}" for k, v in phases.items()) or "none passed"))
    lines += ["", "| op | cases | " + " | ".join(f"{a} pass" for a in adapters) + " | trtkit failures (example) |",
              "|---" * (len(adapters) + 3) + "|"]
    for op in sorted(ops):
        row = ops[op]
        failures = ", ".join(f"{k}: `{v}`" for k, v in row["failure"].items())
        lines.append(f"| {op} | {row['cases']} | " + " | ".join(str(row[a]) for a in adapters) + f" | {failures} |")
    return "\n".join(lines) + "\n"


def case_names(cases: str | None, cases_file: str | None) -> set | None:
    """The case names ``--cases`` and ``--cases-file`` give (``None``: every case)."""
    if not cases and not cases_file:
        return None
    names = {n for n in (cases or "").split(",") if n}
    if cases_file:
        names |= {line.strip() for line in Path(cases_file).read_text().splitlines() if line.strip()}
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated suites")
    parser.add_argument("--adapters", default=",".join(ADAPTERS))
    parser.add_argument("--max-cases", type=int, help="at most N cases per suite")
    parser.add_argument("--cases", help="comma-separated case names (only these)")
    parser.add_argument("--cases-file", help="a file of case names, one a line (only these; with --cases, both)")
    parser.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1), help="worker processes")
    parser.add_argument("--budget-s", type=float, default=330.0, help="stop starting cases after this many seconds")
    parser.add_argument("--case-timeout-s", type=float, default=90.0)
    parser.add_argument("--order", choices=("shuffle", "kind"), default="shuffle",
                        help="shuffle: seeded random order (default); kind: round robin over the suites")
    parser.add_argument("--seed", type=int, default=0, help="the shuffle's seed")
    parser.add_argument("--work-dir", help="where cases are exported (default: a temporary folder)")
    parser.add_argument("--out", help="results JSON (default benchmarks/results/onnx-backend-<trt version>.json)")
    parser.add_argument("--doc", help="also write the per-op markdown table here")
    parser.add_argument("--fake", action="store_true", help="trtkit's fake TensorRT and CUDA (CPU smoke test)")
    args = parser.parse_args(argv)
    import onnx

    started = time.monotonic()
    adapters = tuple(a for a in args.adapters.split(",") if a)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="onnx-backend-"))
    cases = export(discover(args.kinds.split(","), args.max_cases, case_names(args.cases, args.cases_file)), work)
    print(f"{len(cases)} cases exported to {work} in {time.monotonic() - started:.1f} s", flush=True)
    trt_version = "fake-8.6.0" if args.fake else __import__("tensorrt").__version__
    budget = max(0.0, args.budget_s - (time.monotonic() - started))
    results = run_pool(cases, adapters, args.jobs, args.case_timeout_s, budget, args.fake,
                       log=lambda line: print(line, flush=True), order=args.order, seed=args.seed)
    meta = {"tensorrt": trt_version, "onnx": onnx.__version__, "python": sys.version.split()[0],
            "settings": {"jobs": args.jobs, "budget_s": args.budget_s, "case_timeout_s": args.case_timeout_s,
                         "max_cases": args.max_cases, "kinds": args.kinds, "tf32": False,
                         "order": args.order, "seed": args.seed if args.order == "shuffle" else None,
                         "tactic_sources": list(TACTIC_SOURCES)},
            "wall_s": None}
    report = assemble(cases, results, adapters, meta)
    report["wall_s"] = round(time.monotonic() - started, 1)
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"onnx-backend-{trt_version}.json")
    out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    if args.doc:
        Path(args.doc).write_text(support_markdown(report, adapters))
    print(json.dumps(report["summary"], indent=1))
    print(f"wrote {out}" + (f" and {args.doc}" if args.doc else "") + f" in {report['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
