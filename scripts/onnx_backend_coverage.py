"""Which of the onnx wheel's backend cases TensorRT 8.6.0's parser could take, with and without trtkit, on a CPU.

For every case ``scripts/onnx_backend_suite.py`` exports, this predicts on a CPU (no TensorRT) what stops each
adapter before TensorRT is even asked:

- ``raw``: the case's own model, checked against TensorRT 8.6.0's parser: every op (subgraphs too) in the parser's
  list (``trtkit/builder/data/onnx_ops.json``, with 8.6.0's own differences), the default domain only, opset within
  the parser's documented range, and graph inputs/outputs of types an engine takes (no INT64 on 8.6, no FP64, INT16,
  unsigned wider than 8 bits, strings, sequences or optionals anywhere).
- ``trtkit``: the same checks on ``trtkit.prepare``'s result for a parser that answers exactly from that list, and
  what the build refuses before parsing (``PreparedModel.hazards``).

Where nothing stops the trtkit model, it is run with ONNX Runtime on the case's own inputs (converted to the
prepared model's input dtypes, as ``TrtRunner`` does) and its outputs compared with the case's expected outputs
within the case's tolerances (``ort``: ``match``, ``mismatch``, or ``error`` where ONNX Runtime cannot run it).

What this cannot see: the parser's per-op restrictions (attributes it refuses, broadcast rules), build failures and
TensorRT's numerics; the GPU run of ``onnx_backend_suite.py`` decides those.

    python scripts/onnx_backend_coverage.py --work-dir /tmp/onnx-cases --out /tmp/coverage.json

``--gained-out FILE`` lists the cases trtkit is predicted to gain (the raw API stopped, trtkit clear, ONNX Runtime
matching), for ``onnx_backend_suite.py --cases-file FILE`` to measure on the GPU host.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
import signal
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import onnx_backend_suite as suite  # noqa: E402 - a sibling script, not a package

TRT_VERSION = "8.6.0"
# ONNX element types an 8.6 engine takes at its boundary (INT8 needs Q/DQ or ranges; trtkit retypes it)
_IO_TYPES = {"FLOAT", "FLOAT16", "INT32", "BOOL", "UINT8"}
# element types TensorRT 8.6 has no tensors of at all (its parser refuses them anywhere in the graph)
_NO_TENSORS = {"INT16", "UINT16", "UINT32", "UINT64", "STRING", "COMPLEX64", "COMPLEX128", "BFLOAT16",
               "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1", "FLOAT8E8M0"}


def parser_target():
    """A :class:`~trtkit.builder.rewrites.ParserTarget` that answers op support from 8.6.0's list alone."""
    from trtkit.builder.op_support import entry_for
    from trtkit.builder.rewrites import ParserTarget

    entry = entry_for(TRT_VERSION)
    supported = entry["supported"]
    return ParserTarget(f"TensorRT {TRT_VERSION}", entry["max_opset"], False, lambda op: op in supported)


def blockers(proto, supported: frozenset) -> list:
    """What stops TensorRT 8.6.0's parser before it tries: ``["op X", "input INT64", ...]``, sorted, unique.

    An opset above the parser's documented range is not counted: the parser imports such models by op name (the
    case's ``opset`` says where it is above)."""
    import onnx

    found: set = set()
    for node in _all_nodes(proto.graph):
        if (node.domain or "") not in ("", "ai.onnx"):
            found.add(f"op {node.domain}.{node.op_type}")
        elif node.op_type not in supported:
            found.add(f"op {node.op_type}")
    inits = {i.name for i in proto.graph.initializer}
    for kind, values in (("input", [v for v in proto.graph.input if v.name not in inits]),
                         ("output", proto.graph.output)):
        for value in values:
            found |= _type_blockers(value.type, kind, boundary=True)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False).graph.value_info
    except Exception:  # noqa: BLE001 - without inference only the declared types are checked
        inferred = []
    for value in [*inferred, *proto.graph.value_info]:
        found |= _type_blockers(value.type, "tensor", boundary=False)
    for init in proto.graph.initializer:
        name = onnx.TensorProto.DataType.Name(init.data_type)
        if name in _NO_TENSORS:
            found.add(f"tensor {name}")
    return sorted(found)


def _type_blockers(type_proto, kind: str, boundary: bool) -> set:
    import onnx

    field = type_proto.WhichOneof("value")
    if field != "tensor_type":
        return {f"{kind} {field or 'untyped'}"} if field else set()
    elem = type_proto.tensor_type.elem_type
    if not elem:
        return set()
    name = onnx.TensorProto.DataType.Name(elem)
    if name in _NO_TENSORS or (boundary and name not in _IO_TYPES):
        return {f"{kind} {name}"}
    return set()


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                yield from _all_nodes(sub)


def ort_check(proto, inputs: dict, expected: dict, rtol: float, atol: float) -> tuple:
    """``(status, detail)``: the model run by ONNX Runtime on ``inputs`` against ``expected``."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    ort.set_default_logger_severity(3)

    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feed = {}
        for value in session.get_inputs():
            if value.name not in inputs:
                continue
            elem = _declared_elem(proto, value.name)
            dtype = onnx.helper.tensor_dtype_to_np_dtype(elem) if elem else inputs[value.name].dtype
            feed[value.name] = np.asarray(inputs[value.name]).astype(dtype)
        outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    except Exception as exc:  # noqa: BLE001 - the case's result
        return "error", f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
    error = suite.compare(outputs, expected, rtol, atol)
    return ("mismatch", error) if error else ("match", None)


def for_onnxruntime(proto):
    """``proto`` as ONNX Runtime can run it: the opset-17 ``axes`` attributes that the ``attribute-inputs`` rewrite
    gives opset-18+ Reduce nodes for TensorRT 8.6's parser put back as the inputs their opset has (ONNX Runtime
    refuses the attribute at that opset); anything else is left as it is."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from trtkit.quant.opset import REDUCE_AXES_AT_18

    if _opset(proto) < 18:
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for index, node in enumerate(copy.graph.node):
        axes = next((a for a in node.attribute if a.name == "axes"), None)
        if node.op_type not in REDUCE_AXES_AT_18 or axes is None:
            continue
        name = f"{node.output[0]}__ort_axes_{index}"
        copy.graph.initializer.append(numpy_helper.from_array(np.array(list(axes.ints), dtype=np.int64), name))
        keep = [a for a in node.attribute if a.name != "axes"]
        del node.attribute[:]
        node.attribute.extend(keep)
        node.input.append(name)
    return copy


def _opset(proto) -> int:
    return max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _declared_elem(proto, name: str) -> int:
    for value in proto.graph.input:
        if value.name == name and value.type.HasField("tensor_type"):
            return value.type.tensor_type.elem_type
    return 0


class _Late(Exception):
    pass


def _alarm(*_):
    raise _Late("took longer than the case timeout")


def check_case(case: dict, timeout_s: int = 60) -> dict:
    """One exported case: both adapters' blockers, the rewrites trtkit applied, ONNX Runtime's verdict."""
    import onnx

    from trtkit.builder.prepare import prepare

    entry = {"kind": case["kind"], "ops": case.get("ops", [])}
    if "dir" not in case:
        return {**entry, "skip": case.get("skip")}
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout_s)
    try:
        target = parser_target()
        supported = frozenset(op for op in _all_ops() if target.supported(op, 0))
        model = onnx.load(str(Path(case["dir"]) / "model.onnx"))
        entry["raw"] = blockers(model, supported)
        entry["opset"] = _opset(model)
        prepared = prepare(model, target=target)
        entry["rewrites"] = sorted({f"{r.rewrite}:{r.status}" for r in prepared.rewrites})
        # what trtkit.build refuses before parsing (nodes the parser would read with other semantics, missing types)
        entry["trtkit"] = blockers(prepared.proto, supported) + [f"hazard {h.op_type}" for h in prepared.hazards]
        entry["trtkit_opset"] = _opset(prepared.proto)
        if not entry["trtkit"]:
            inputs, expected = suite.load_arrays(Path(case["dir"]))
            entry["ort"], entry["ort_error"] = ort_check(for_onnxruntime(prepared.proto), inputs, expected,
                                                         case["rtol"], case["atol"])
            if entry["ort"] != "match":  # is it the rewrite, or can ONNX Runtime not run the case at all?
                entry["ort_original"] = ort_check(model, inputs, expected, case["rtol"], case["atol"])[0]
    except Exception as exc:  # noqa: BLE001 - recorded, never fatal to the run
        entry["failure"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
    finally:
        signal.alarm(0)
    return entry


@functools.lru_cache(maxsize=1)
def _all_ops() -> frozenset:
    """Every ai.onnx op name the installed onnx knows."""
    import onnx

    return frozenset(s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in ("", "ai.onnx"))


def _work(case):
    return case["name"], check_case(case)


def ranked(cases: dict, adapter: str) -> list:
    """``[(reason, cases)]``, most cases first: every blocker a failing case has counts once for it (an element type
    once, wherever it is: ``dtype INT64`` for an INT64 input and output)."""
    counts: Counter = Counter()
    for entry in cases.values():
        reasons = {r if r.startswith(("op ", "hazard ")) else "dtype " + r.split(" ", 1)[1]
                   for r in entry.get(adapter) or []}
        for reason in reasons:
            counts[reason] += 1
        if adapter == "trtkit" and entry.get("ort") in ("mismatch", "error"):
            whose = "the case itself" if entry.get("ort_original") != "match" else "after prepare"
            counts[f"onnxruntime {entry['ort']} ({whose})"] += 1
        if "failure" in entry:
            counts["check failed: " + entry["failure"].split(":")[0]] += 1
    return counts.most_common()


def gained(cases: dict) -> list:
    """Cases the raw API is stopped on and trtkit is not, ONNX Runtime matching the case's outputs, sorted."""
    return sorted(n for n, e in cases.items() if e.get("raw") and e.get("ort") == "match")


def summary(cases: dict) -> dict:
    reached = [e for e in cases.values() if "raw" in e]
    return {
        "cases": len(cases),
        "exported": sum(1 for e in cases.values() if "skip" not in e),
        "raw_clear": sum(1 for e in reached if not e["raw"]),
        "trtkit_clear": sum(1 for e in reached if "trtkit" in e and not e["trtkit"]),
        "trtkit_clear_ort_match": sum(1 for e in reached if e.get("ort") == "match"),
        "gained": len(gained(cases)),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(suite.KINDS))
    parser.add_argument("--cases", help="comma-separated case names (only these)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--work-dir", required=True, help="where cases are exported")
    parser.add_argument("--out", required=True, help="the coverage JSON")
    parser.add_argument("--top", type=int, default=15, help="reasons to print per adapter")
    parser.add_argument("--gained-out", help="write the names of the cases trtkit clears and the raw API does not, "
                        "ONNX Runtime matching (one a line; onnx_backend_suite.py --cases-file reads it)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    names = set(args.cases.split(",")) if args.cases else None
    cases = suite.export(suite.discover(args.kinds.split(","), None, names), Path(args.work_dir))
    print(f"{len(cases)} cases exported in {time.monotonic() - started:.1f} s", flush=True)
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=50) as pool:
        results = dict(pool.imap_unordered(_work, cases, chunksize=4))
    report = {"tensorrt": TRT_VERSION, "summary": summary(results),
              "ranked": {a: ranked(results, a) for a in ("raw", "trtkit")}, "cases": results}
    Path(args.out).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    if args.gained_out:
        Path(args.gained_out).write_text("".join(f"{n}\n" for n in gained(results)))
    print(json.dumps(report["summary"], indent=1))
    for adapter in ("raw", "trtkit"):
        print(f"{adapter}: what stops the most cases")
        for reason, count in report["ranked"][adapter][: args.top]:
            print(f"  {count:5d}  {reason}")
    print(f"wrote {args.out} in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
