"""Pre-flight check: which of a model's ops the installed TensorRT's ONNX parser supports, before a long build.

:func:`preflight` lists every op type with its count and opset, asks the parser itself (``supports_model`` /
``supports_model_v2`` and ``supports_operator``, in a child process so a parser crash is contained), names the nodes
it cannot import, and adds what is known about later TensorRT versions from a small static table.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from trtkit import _version_compat as compat
from trtkit._lazy import tensorrt
from trtkit._version_compat import ParserIssue
from trtkit.builder import isolate
from trtkit.builder.crash_report import model_crash_context
from trtkit.builder.isolate import ChildLog, phase_sink, run_isolated
from trtkit.builder.op_support import max_documented_opset, op_table, table_status
from trtkit.builder.rewrites.dims import describe_ambiguity
from trtkit.builder.sanitize import fold_constants
from trtkit.errors import DependencyError, IsolationError, TrtkitError
from trtkit.log import make_trt_logger
from trtkit.model import load_model

SUPPORTED, UNSUPPORTED, FAILED, CRASHED, UNKNOWN = "supported", "unsupported", "failed", "crashed", "unknown"


@dataclass
class OpRow:
    """One op type of the model."""

    op_type: str
    domain: str
    opset: int | None
    count: int
    status: str = UNKNOWN
    nodes: list = field(default_factory=list)
    note: str = ""


@dataclass
class UnsupportedNode:
    """A node the parser cannot import, and why."""

    index: int
    name: str
    op_type: str
    reason: str


@dataclass
class CheckReport:
    """The result of :func:`preflight`.

    Attributes:
        model: the model's label (file name or graph name).
        opsets: ``{domain: version}`` the model imports (``""`` is ai.onnx).
        trt_version: the TensorRT version asked, or ``None`` if it could not be.
        rows: one :class:`OpRow` per (domain, op type), in order of first appearance.
        unsupported_nodes: every :class:`UnsupportedNode`.
        unsupported_subgraphs: node names of each subgraph the parser marks unsupported (10.x reports these).
        errors: the parser's error messages.
        crash: the :class:`~trtkit.errors.IsolationError` message if the parser crashed during the check.
        queried: whether TensorRT's parser answered (``False``: TensorRT missing; static knowledge only).
        notes: anything else worth saying (opset newer than the parser documents, ...).
        listed: ``{op_type: {TensorRT version: True/False/None}}``: what onnx-tensorrt's operator list of each
            version trtkit knows says (``None``: the list does not name the op).
        not_asked: why TensorRT's parser was not asked (``None`` when it was, or crashed).
    """

    model: str
    opsets: dict
    trt_version: str | None
    rows: list
    unsupported_nodes: list = field(default_factory=list)
    unsupported_subgraphs: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    crash: str | None = None
    queried: bool = False
    notes: list = field(default_factory=list)
    listed: dict = field(default_factory=dict)
    not_asked: str | None = None

    @property
    def ok(self) -> bool:
        """True when nothing is known to stop the parser (not a promise that the build will succeed)."""
        bad = {UNSUPPORTED, FAILED, CRASHED}
        return self.crash is None and not self.unsupported_nodes and not any(r.status in bad for r in self.rows)

    def to_json(self) -> dict:
        data = asdict(self)
        data["ok"] = self.ok
        return data

    def failure_message(self) -> str:
        """One paragraph saying what the parser cannot import and what to try (empty when ``ok``)."""
        if self.ok:
            return ""
        if self.crash:
            return self.crash
        trt = f"TensorRT {self.trt_version}" if self.trt_version else "This TensorRT"
        nodes = self.unsupported_nodes
        listed = "; ".join(f"'{n.name}' ({n.op_type}): {n.reason}" for n in nodes[:5]) or ", ".join(
            r.op_type for r in self.rows if r.status in (UNSUPPORTED, FAILED, CRASHED)
        )
        more = f"; and {len(nodes) - 5} more" if len(nodes) > 5 else ""
        what = f"{len(nodes)} node(s)" if nodes else "some ops"
        return (
            f"{trt}'s ONNX parser cannot import {what} of '{self.model}': {listed}{more}. "
            "The op check's table lists every op; try constant folding, a lower opset, or a newer TensorRT."
        )


def preflight(model, trt=None, *, isolate: bool = True, trt_factory=None, timeout: float | None = 600) -> CheckReport:
    """Check a model's ops against the installed TensorRT's ONNX parser.

    Args:
        model: ONNX path, bytes, ``onnx.ModelProto`` or :class:`~trtkit.model.LoadedModel`.
        trt: a ``tensorrt`` module to ask in this process (tests pass a fake). When ``None``, the installed TensorRT
            is asked in a child process (``isolate=True``), so a parser crash becomes part of the report.
        isolate: ask in a child process (default); ``False`` asks in this process.
        trt_factory: picklable callable returning the ``tensorrt`` module to use in the child (tests).
        timeout: seconds before the child is stopped.

    Returns:
        A :class:`CheckReport`; ``report.ok`` is False when a node is unsupported or the parser crashed.

    Raises:
        ModelError: the model cannot be read.
    """
    loaded = load_model(model, check=False)
    report = _static_report(loaded)
    _fold_note(report, loaded)  # constant folding tried on a copy: a note when it would change the model
    path = str(loaded.path) if loaded.path else None
    try:
        if trt is not None or not isolate:
            answer = query_parser(trt, loaded.data, path, _op_types(loaded.proto))
        else:
            answer = _query_isolated(loaded, path, trt_factory, timeout)
    except IsolationError as exc:
        _apply_crash(report, loaded.proto, exc)
        return report
    except Exception as exc:  # noqa: BLE001 - the check advises; it must not block a build by failing itself
        kind = "" if isinstance(exc, DependencyError) else f"{type(exc).__name__}: "
        report.not_asked = f"{kind}{exc}"
        return report
    _apply_answer(report, loaded.proto, answer)
    return report


def _fold_note(report: CheckReport, loaded) -> None:
    try:
        _, fold = fold_constants(loaded)
    except TrtkitError:
        return  # a hint only; the check itself goes on
    if fold.changed:
        summary = fold.summary().removeprefix("constant folding: ")
        report.notes.append(f"constant folding would change this model: {summary}")


def _query_isolated(loaded, path, trt_factory, timeout):
    factory = trt_factory or isolate.DEFAULT_TRT_FACTORY  # read at call time: tests replace it
    return run_isolated(
        _query_in_child,
        factory,
        loaded.data,
        path,
        _op_types(loaded.proto),
        timeout=timeout,
        crash_context=lambda: model_crash_context(loaded, "the op support check"),
    )


def _query_in_child(trt_factory, model_bytes, path, op_types):
    phase_sink("check")
    trt = trt_factory() if trt_factory is not None else None
    return query_parser(trt, model_bytes, path, op_types)


def query_parser(trt, model_bytes: bytes, path, op_types) -> dict:
    """Ask the parser (in this process) about a model; a plain, picklable dict.

    Returns:
        ``{"trt_version", "supported", "subgraphs": [(nodes, supported)], "errors": [ParserIssue as dict],
        "ops": {op_type: bool | None}}``.

    Raises:
        DependencyError: TensorRT is missing or CUDA cannot be initialized.
    """
    trt = trt or tensorrt()
    network, parser = _network_and_parser(trt)
    return _ask(trt, parser, model_bytes, path, op_types)


def check_with_parser(loaded, trt, parser) -> CheckReport:
    """The op check with a parser the caller already has (the build's own, in the build's process)."""
    path = str(loaded.path) if loaded.path else None
    report = _static_report(loaded)
    _apply_answer(report, loaded.proto, _ask(trt, parser, loaded.data, path, _op_types(loaded.proto)))
    return report


def _ask(trt, parser, model_bytes: bytes, path, op_types) -> dict:
    supported, subgraphs = compat.parser_supports_model(parser, model_bytes, path)
    return {
        "trt_version": compat.version_string(trt),
        "supported": supported,
        "subgraphs": subgraphs,
        "errors": [asdict(issue) for issue in compat.parser_errors(parser)],
        "ops": {op: compat.parser_supports_operator(parser, op) for op in op_types},
    }


def parse_only(model_bytes: bytes, path: str | None = None, trt=None) -> dict:
    """Parse a model with TensorRT's ONNX parser and report (no build); run it through ``run_isolated``.

    Returns:
        ``{"parsed": bool, "errors": [str], "trt": version, "layers": number of network layers}``.

    Raises:
        DependencyError: TensorRT is missing or CUDA cannot be initialized.
    """
    trt = trt or tensorrt()
    network, parser = _network_and_parser(trt)
    parsed = bool(parser.parse(model_bytes, path) if path else parser.parse(model_bytes))
    return {
        "parsed": parsed,
        "errors": [str(e) for e in compat.parser_errors(parser)],
        "trt": compat.version_string(trt),
        "layers": int(network.num_layers),
    }


def _network_and_parser(trt) -> tuple:
    """An empty network and its ONNX parser, logging at VERBOSE so that, in a child, the node being imported reaches
    the parent before any crash."""
    logger = make_trt_logger(trt, min_severity="VERBOSE", sink=ChildLog("WARNING"))
    network = _create_builder(trt, logger).create_network(compat.network_flags(trt))
    return network, trt.OnnxParser(network, logger)


def _create_builder(trt, logger):
    try:
        builder = trt.Builder(logger)
    except TypeError as exc:  # pybind11's "factory function returned nullptr": CUDA failed to initialize
        builder = None
        reason = str(exc)
    else:
        reason = "the builder is None"
    if builder is None:
        raise DependencyError(
            f"TensorRT could not create a builder (CUDA failed to initialize: {reason}); run `trtkit doctor`"
        )
    return builder


# --- assembling the report -------------------------------------------------------------------------------------------


def _op_types(proto) -> list:
    return sorted({n.op_type for n in proto.graph.node})  # the parser looks importers up by op type alone


def _static_report(loaded) -> CheckReport:
    proto = loaded.proto
    opsets = {(o.domain or ""): int(o.version) for o in proto.opset_import}
    counts = Counter(((n.domain or ""), n.op_type) for n in proto.graph.node)
    rows = []
    for domain, op in dict.fromkeys(((n.domain or ""), n.op_type) for n in proto.graph.node):
        version = opsets.get(domain, opsets.get("ai.onnx") if domain == "" else None)
        rows.append(OpRow(op, domain or "ai.onnx", version, counts[(domain, op)], note=static_note(op, domain)))
    label = str(loaded.path) if loaded.path else loaded.name
    listed = {
        row.op_type: {v: table_status(row.op_type, v) for v in op_table()} for row in rows if row.domain == "ai.onnx"
    }
    return CheckReport(
        model=label, opsets=opsets, trt_version=None, rows=rows, notes=describe_ambiguity(proto), listed=listed
    )


def static_note(op_type: str, domain: str = "") -> str:
    """What onnx-tensorrt's operator lists say about an op across TensorRT versions ("" when every list has it)."""
    if (domain or "") not in ("", "ai.onnx"):
        return f"custom domain '{domain}': needs a TensorRT plugin registered under this op name"
    table = op_table()
    has = [v for v, t in table.items() if op_type in t["supported"]]
    if len(has) == len(table):
        return ""
    listed = ", ".join(table)
    if not has:
        said = "marked unsupported" if any(op_type in t["unsupported"] for t in table.values()) else "not listed"
        return f"no native TensorRT support: {said} in onnx-tensorrt's operator lists for TensorRT {listed}"
    return f"supported in TensorRT {', '.join(has)} (onnx-tensorrt's operator lists for {listed})"


def _apply_answer(report: CheckReport, proto, answer: dict) -> None:
    report.queried, report.trt_version = True, answer["trt_version"]
    nodes = list(proto.graph.node)
    issues = [_named_issue(ParserIssue(**e), nodes) for e in answer["errors"]]
    report.errors = [str(issue) for issue in issues]
    covered = {i for indices, _ in answer["subgraphs"] for i in indices}
    failed = {issue.node_index: issue.description for issue in issues if issue.node_index >= 0}
    if not answer["supported"]:
        for index, node in enumerate(nodes):
            if index not in covered or index in failed:
                reason = _reason(node, answer["ops"], failed.get(index))
                report.unsupported_nodes.append(UnsupportedNode(index, _name(node, index), node.op_type, reason))
        report.unsupported_subgraphs = _unsupported_subgraphs(answer["subgraphs"], nodes)
    _mark_rows(report, answer["ops"])
    _opset_note(report)


def _named_issue(issue, nodes: list):
    """8.6 reports only a node index: add the node's name and op from the model."""
    from dataclasses import replace

    if issue.node_name or not 0 <= issue.node_index < len(nodes):
        return issue
    node = nodes[issue.node_index]
    return replace(issue, node_name=_name(node, issue.node_index), node_op=node.op_type)


def _reason(node, ops: dict, error: str | None) -> str:
    if ops.get(node.op_type) is False:
        return f"no importer for {node.op_type} in this TensorRT"
    if error:
        return error
    if (node.domain or "") not in ("", "ai.onnx"):
        return f"custom op {node.domain}.{node.op_type}: no plugin registered"
    return "depends on an input or node the parser cannot import"


def _unsupported_subgraphs(subgraphs: list, nodes: list) -> list:
    # 8.6 marks every subgraph unsupported once anything fails; per-subgraph answers mean something only when some
    # subgraph is marked supported (10.x's supports_model_v2)
    if not any(supported for _, supported in subgraphs):
        return []
    return [[_name(nodes[i], i) for i in indices] for indices, supported in subgraphs if not supported]


def _mark_rows(report: CheckReport, ops: dict) -> None:
    by_op: dict = {}
    for node in report.unsupported_nodes:
        by_op.setdefault(node.op_type, []).append(node.name)
    for row in report.rows:
        row.nodes = by_op.get(row.op_type, [])
        if ops.get(row.op_type) is False:
            row.status = UNSUPPORTED
        elif row.nodes:
            row.status = FAILED
        else:
            row.status = SUPPORTED


def _opset_note(report: CheckReport) -> None:
    opset = report.opsets.get("", report.opsets.get("ai.onnx"))
    documented = max_documented_opset(compat.version_parts(report.trt_version))
    if opset and documented and opset > documented:
        report.notes.append(
            f"the model uses opset {opset}; TensorRT {report.trt_version}'s parser documents opsets up to "
            f"{documented}: re-export at opset {documented} or use a newer TensorRT"
        )


def _apply_crash(report: CheckReport, proto, error: IsolationError) -> None:
    report.crash = str(error)
    crash = error.crash
    report.trt_version = (crash.context.get("trt_version") if crash else None) or report.trt_version
    node_name = crash.node if crash else None
    if node_name is None:
        return
    for index, node in enumerate(proto.graph.node):
        if _name(node, index) == node_name or node.name == node_name:
            report.unsupported_nodes.append(
                UnsupportedNode(index, node_name, node.op_type, f"crashed TensorRT's parser ({crash.signal})")
            )
            break
    for row in report.rows:
        if row.op_type == crash.op_type:
            row.status, row.nodes = CRASHED, [node_name]
    _opset_note(report)


def _name(node, index: int) -> str:
    # the parser's own naming for unnamed nodes (onnx-tensorrt getNodeName)
    if node.name:
        return node.name
    return f"node_of_{node.output[0]}" if node.output else f"#{index}"
