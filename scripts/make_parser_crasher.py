#!/usr/bin/env python3
"""Find ONNX models that crash the installed TensorRT's ONNX parser, safely (each parse runs in a child process).

Candidates are small scaled-dot-product attentions expanded into primitive ops (MatMul, Softmax, Where, ...) at
recent opsets, in several flavours (masking with -inf, scale computed from shapes, causal masks built from Range,
softmax expanded with opset-18 reductions that take axes as an input, dynamic sequence lengths). For each candidate
the script writes ``<name>.onnx`` and records what the parser did: parsed, refused (its errors), or crashed (signal
and the node being imported). The summary goes to ``<out_dir>/crashers.json``.

Usage (on the GPU host)::

    python scripts/make_parser_crasher.py OUT_DIR [--opset 17 21] [--only NAME ...] [--no-fold]

For a crasher it also tries the crashing node alone (``<name>.minimal.onnx``); unless ``--no-fold``, it also tries
each candidate after trtkit's constant folding (``<name>.folded.onnx``) when folding changes it.

Exit status 0 whatever the parser did (the JSON says); 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]

B, H, S, D = 1, 2, 8, 16


def _const(name, array):
    return helper.make_node("Constant", [], [name], name=f"/attn/{name}",
                            value=numpy_helper.from_array(np.asarray(array), name))


def _qkv(dynamic=False):
    seq = "S" if dynamic else S
    return [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, H, seq, D]) for n in ("q", "k", "v")]


def _finish(name, nodes, inputs, opset, dynamic=False, extra_outputs=()):
    seq = "S" if dynamic else S
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [B, H, seq, D])
    graph = helper.make_graph(nodes, name, inputs, [out, *extra_outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 17 else 9 if opset <= 20 else 10
    return model


def _scores(scale_node_output="scale"):
    return [
        helper.make_node("Transpose", ["k"], ["kT"], name="/attn/Transpose", perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kT"], ["qk"], name="/attn/MatMul"),
        helper.make_node("Mul", ["qk", scale_node_output], ["scores"], name="/attn/Mul"),
    ]


def sdpa_plain(opset):
    nodes = [_const("scale", np.float32(1 / np.sqrt(D)))] + _scores() + [
        helper.make_node("Softmax", ["scores"], ["probs"], name="/attn/Softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["out"], name="/attn/MatMul_1"),
    ]
    return _finish("sdpa_plain", nodes, _qkv(), opset)


def sdpa_mask_where(opset):
    mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, [B, 1, S, S])
    nodes = [_const("scale", np.float32(1 / np.sqrt(D))), _const("ninf", np.float32(-np.inf))] + _scores() + [
        helper.make_node("Where", ["mask", "scores", "ninf"], ["masked"], name="/attn/Where"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="/attn/Softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["out"], name="/attn/MatMul_1"),
    ]
    return _finish("sdpa_mask_where", nodes, _qkv() + [mask], opset)


def sdpa_shape_scale(opset):
    """Scale = 1/sqrt(last dim of q), computed from Shape at run time (as torch exports it), dynamic sequence."""
    nodes = [
        helper.make_node("Shape", ["q"], ["q_shape"], name="/attn/Shape", start=-1),
        helper.make_node("Cast", ["q_shape"], ["q_dim"], name="/attn/Cast", to=TensorProto.FLOAT),
        helper.make_node("Sqrt", ["q_dim"], ["sqrt_d"], name="/attn/Sqrt"),
        helper.make_node("Reciprocal", ["sqrt_d"], ["scale"], name="/attn/Reciprocal"),
    ] + _scores() + [
        helper.make_node("Softmax", ["scores"], ["probs"], name="/attn/Softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["out"], name="/attn/MatMul_1"),
    ]
    return _finish("sdpa_shape_scale", nodes, _qkv(dynamic=True), opset, dynamic=True)


def sdpa_causal_range(opset):
    """Causal mask from Shape → Gather → Range → Unsqueeze → LessOrEqual → Where(-inf), dynamic sequence."""
    nodes = [
        _const("scale", np.float32(1 / np.sqrt(D))), _const("ninf", np.float32(-np.inf)),
        _const("zero", np.int64(0)), _const("one", np.int64(1)), _const("two", np.int64(2)),
        _const("ax0", np.array([0], dtype=np.int64)), _const("ax1", np.array([1], dtype=np.int64)),
        helper.make_node("Shape", ["q"], ["q_shape"], name="/attn/Shape"),
        helper.make_node("Gather", ["q_shape", "two"], ["seq"], name="/attn/Gather", axis=0),
        helper.make_node("Range", ["zero", "seq", "one"], ["pos"], name="/attn/Range"),
        helper.make_node("Unsqueeze", ["pos", "ax0"], ["row"], name="/attn/Unsqueeze"),
        helper.make_node("Unsqueeze", ["pos", "ax1"], ["col"], name="/attn/Unsqueeze_1"),
        helper.make_node("LessOrEqual", ["row", "col"], ["keep"], name="/attn/LessOrEqual"),
    ] + _scores() + [
        helper.make_node("Where", ["keep", "scores", "ninf"], ["masked"], name="/attn/Where"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="/attn/Softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["out"], name="/attn/MatMul_1"),
    ]
    return _finish("sdpa_causal_range", nodes, _qkv(dynamic=True), opset, dynamic=True)


def sdpa_expanded_softmax(opset):
    """Softmax written out with ReduceMax/ReduceSum whose axes are an input (opset 18+ form)."""
    axes = [_const("axes", np.array([-1], dtype=np.int64))]
    nodes = [_const("scale", np.float32(1 / np.sqrt(D)))] + axes + _scores() + [
        helper.make_node("ReduceMax", ["scores", "axes"], ["mx"], name="/attn/ReduceMax", keepdims=1),
        helper.make_node("Sub", ["scores", "mx"], ["shifted"], name="/attn/Sub"),
        helper.make_node("Exp", ["shifted"], ["e"], name="/attn/Exp"),
        helper.make_node("ReduceSum", ["e", "axes"], ["den"], name="/attn/ReduceSum", keepdims=1),
        helper.make_node("Div", ["e", "den"], ["probs"], name="/attn/Div"),
        helper.make_node("MatMul", ["probs", "v"], ["out"], name="/attn/MatMul_1"),
    ]
    return _finish("sdpa_expanded_softmax", nodes, _qkv(), max(opset, 18))


def sdpa_full(opset):
    """Everything together: shape-derived scale, causal mask, -inf Where, expanded softmax, dynamic sequence."""
    model = sdpa_causal_range(opset)
    graph = model.graph
    softmax = [n for n in graph.node if n.op_type == "Softmax"][0]
    index = list(graph.node).index(softmax)
    expanded = [
        _const("axes", np.array([-1], dtype=np.int64)),
        helper.make_node("ReduceMax", ["masked", "axes"], ["mx"], name="/attn/ReduceMax", keepdims=1),
        helper.make_node("Sub", ["masked", "mx"], ["shifted"], name="/attn/Sub"),
        helper.make_node("Exp", ["shifted"], ["e"], name="/attn/Exp"),
        helper.make_node("ReduceSum", ["e", "axes"], ["den"], name="/attn/ReduceSum", keepdims=1),
        helper.make_node("Div", ["e", "den"], ["probs"], name="/attn/Div"),
    ]
    nodes = list(graph.node[:index]) + expanded + list(graph.node[index + 1:])
    del graph.node[:]
    graph.node.extend(nodes)
    graph.name = "sdpa_full"
    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid("", max(opset, 18))])
    return model


CANDIDATES = {f.__name__: f for f in (sdpa_plain, sdpa_mask_where, sdpa_shape_scale, sdpa_causal_range,
                                      sdpa_expanded_softmax, sdpa_full)}


def candidates(opset: int = 21) -> dict:
    """``{name: onnx.ModelProto}`` of every candidate at ``opset``."""
    return {name: make(opset) for name, make in CANDIDATES.items()}


def try_candidate(name: str, model, out_dir: Path, timeout: float = 300) -> dict:
    """Write the model, parse it in a child, and say what happened."""
    import onnx

    from trtkit.builder.crash_report import model_crash_context
    from trtkit.builder.isolate import run_isolated
    from trtkit.builder.opcheck import parse_only
    from trtkit.errors import IsolationError, TrtkitError

    path = out_dir / f"{name}.onnx"
    onnx.save(model, path)
    started = time.monotonic()
    record = {"name": name, "path": str(path), "opset": max(o.version for o in model.opset_import),
              "nodes": len(model.graph.node)}
    try:
        record.update(outcome="parsed", **run_isolated(parse_only, path.read_bytes(), timeout=timeout,
                                                       crash_context=model_crash_context(str(path), "parsing")))
        if not record["parsed"]:
            record["outcome"] = "refused"
    except IsolationError as exc:
        crash = exc.crash
        record.update(outcome="crashed", signal=crash.signal, node=crash.node, op_type=crash.op_type,
                      nodes_seen=crash.nodes_seen, message=str(exc), output_tail=crash.output_tail[-10:])
    except TrtkitError as exc:
        record.update(outcome="error", error_class=type(exc).__name__, message=str(exc))
    record["seconds"] = round(time.monotonic() - started, 2)
    return record


def minimal_model(model, node_name: str):
    """The crashing node alone: its inputs become graph inputs (types from shape inference), or ``None``."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    node = next((n for n in graph.node if n.name == node_name), None)
    if node is None:
        return None
    infos = {v.name: v for v in list(graph.input) + list(graph.value_info) + list(graph.output)}
    initializers = [t for t in graph.initializer if t.name in node.input]
    for const in graph.node:  # constants stay constants (a Reduce's axes must be, for example)
        if const.op_type == "Constant" and const.output[0] in node.input and const.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(const.attribute[0].t)
            tensor.name = const.output[0]
            initializers.append(tensor)
    known = {t.name for t in initializers}
    inputs = [infos[name] for name in node.input if name and name not in known and name in infos]
    outputs = [infos.get(name) or helper.make_empty_tensor_value_info(name) for name in node.output if name]
    if len(inputs) + len(initializers) != len([i for i in node.input if i]):
        return None  # an input's type is unknown: the single node cannot stand alone
    single = helper.make_graph([node], f"{graph.name}_minimal", inputs, outputs, initializer=initializers)
    minimal = helper.make_model(single, opset_imports=list(model.opset_import))
    minimal.ir_version = model.ir_version
    return minimal


def _with_followups(name: str, model, out_dir: Path, fold: bool) -> dict:
    """Try a candidate; for a crasher also its crashing node alone; with ``fold``, also the folded model."""
    record = try_candidate(name, model, out_dir)
    if record["outcome"] == "crashed" and record.get("node"):
        minimal = minimal_model(model, record["node"])
        if minimal is not None:
            record["minimal"] = try_candidate(f"{name}.minimal", minimal, out_dir)
    if fold:
        from trtkit.builder.sanitize import fold_constants

        folded, report = fold_constants(model)
        if report.changed:
            record["folded"] = dict(try_candidate(f"{name}.folded", folded, out_dir), fold=report.summary())
    return record


def _line(record: dict) -> str:
    where = f" at node {record.get('node')} [{record.get('op_type')}]" if record["outcome"] == "crashed" else ""
    return f"{record['name']:34s} {record['outcome']}{where} ({record['seconds']} s)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder for the candidate models and crashers.json")
    parser.add_argument("--opset", type=int, nargs="+", default=[21],
                        help="ai.onnx opset(s) of the candidates (default 21)")
    parser.add_argument("--only", nargs="*", choices=sorted(CANDIDATES), help="try only these candidates")
    parser.add_argument("--no-fold", dest="fold", action="store_false",
                        help="do not also try each candidate after constant folding")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for opset in args.opset:
        for name, model in candidates(opset).items():
            if args.only and name not in args.only:
                continue
            record = _with_followups(f"{name}_op{opset}", model, out_dir, args.fold)
            results.append(record)
            for sub in [record] + [record[k] for k in ("minimal", "folded") if k in record]:
                print(_line(sub), flush=True)
    summary = {"opsets": args.opset, "results": results,
               "crashers": [r["name"] for r in results if r["outcome"] == "crashed"]}
    (out_dir / "crashers.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"crashers: {summary['crashers'] or 'none'}; details in {out_dir / 'crashers.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
