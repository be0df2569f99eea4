"""Functions run in child processes by the isolation tests (module level, so they pickle by reference)."""

from __future__ import annotations

import os
import signal
import time

from trtkit.builder.isolate import emit, log_sink, phase_sink
from trtkit.errors import ParseError, ProfileError


def add(a, b, *, scale=1):
    return (a + b) * scale


def big_result(n):
    return b"\x01" * n


def stream_then_return(count):
    for i in range(count):
        emit({"kind": "progress", "i": i})
    print("hello from the child's stdout", flush=True)
    return "done"


def parse_then_crash(sig_name="SIGSEGV"):
    """Imitate TensorRT's parser: VERBOSE 'Parsing node' lines, then die inside 'native' code."""
    phase_sink("parse")
    log_sink("VERBOSE", "ModelImporter.cpp:1234: Parsing node: /embed/Gather [Gather]")
    log_sink("VERBOSE", "Parsing node: /attn/Where [Where]")
    os.kill(os.getpid(), getattr(signal, sig_name))
    time.sleep(10)


def crash_during_build():
    phase_sink("parse")
    log_sink("VERBOSE", "Parsing node: conv0 [Conv]")
    phase_sink("build")
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(10)


def segfault_via_ctypes():
    import ctypes

    ctypes.string_at(0)


def abort():
    os.abort()


def run_out_of_memory():
    raise MemoryError("no room for the hoard")


def sigkill_self():
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)


def raise_parse_error():
    raise ParseError("TensorRT's ONNX parser could not parse 'm.onnx': node 'x' (Foo): no importer", ["issue"])


def raise_profile_error():
    raise ProfileError("Input 'images': shape (1, 3, 640, 641) is outside profile 0")


def raise_value_error():
    raise ValueError("a bug, not bad input")


class Unpicklable(Exception):
    def __init__(self, message, handle):
        super().__init__(message)
        self.handle = handle

    def __reduce__(self):
        raise TypeError("cannot pickle")


def raise_unpicklable():
    raise Unpicklable("odd failure", object())


def exit_quietly():
    os._exit(3)


def sleep_forever(marker_path=None):
    if marker_path:  # written whole, then renamed: a reader never sees an empty or partial pid
        with open(f"{marker_path}.tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(f"{marker_path}.tmp", marker_path)
    emit({"kind": "phase", "name": "sleep"})
    while True:
        time.sleep(0.1)


def return_lambda():
    return lambda: None


def crashing_fake_trt(version="8.6.0", crash_op="Where"):
    """A fake ``tensorrt`` whose ONNX parser dies by SIGSEGV on the first node of type ``crash_op``, like 8.6's."""
    import onnx

    from tests.fakes.fake_trt import make_fake_trt
    from tests.fakes.fake_trt.builder import Severity

    trt = make_fake_trt(version)
    original = trt.OnnxParser.parse

    def parse(self, model, path=None):
        for node in onnx.load_from_string(bytes(model)).graph.node:
            self.logger.log(Severity.VERBOSE, f"Parsing node: {node.name} [{node.op_type}]")
            if node.op_type == crash_op:
                os.kill(os.getpid(), signal.SIGSEGV)
        return original(self, model, path)

    trt.OnnxParser.parse = parse
    return trt


def fake_trt(version="8.6.0"):
    from tests.fakes.fake_trt import make_fake_trt

    return make_fake_trt(version)


def fake_trt_with_support_query(version="8.6.0", crash_op=None, unsupported=("NotARealOp",)):
    """A fake ``tensorrt`` whose parser answers ``supports_model`` (8.6, 10.0) or ``supports_model_v2`` (10.1+).

    Semantics as onnx-tensorrt's: parsing stops at the first node it cannot import; the subgraphs are the runs of
    nodes (in order) that have an importer and did not fail; on 8.6 every subgraph is marked unsupported once
    anything failed. ``crash_op`` makes the parse die by SIGSEGV at the first node of that type.
    """
    import onnx

    from tests.fakes.fake_trt import make_fake_trt
    from tests.fakes.fake_trt.builder import ParserError, ParserError10, Severity

    trt = make_fake_trt(version)
    error_cls = ParserError if version.startswith("8.") else ParserError10
    v2 = not (version.startswith("8.") or version.startswith("10.0"))

    class Parser(trt.OnnxParser):
        def supports_operator(self, op):
            return op not in unsupported

        def _check(self, model):
            nodes = list(onnx.load_from_string(bytes(model)).graph.node)
            failed = None
            for i, node in enumerate(nodes):
                self.logger.log(Severity.VERBOSE, f"Parsing node: {node.name} [{node.op_type}]")
                if node.op_type == crash_op:
                    os.kill(os.getpid(), signal.SIGSEGV)
                if not self.supports_operator(node.op_type):
                    failed = i
                    self.errors.append(error_cls(trt.ErrorCode.UNSUPPORTED_NODE,
                                                 f"No importer registered for op: {node.op_type}", i, node.name,
                                                 node.op_type))
                    break
            subgraphs, current = [], None
            for i, node in enumerate(nodes):
                if self.supports_operator(node.op_type) and i != failed:
                    if current is None:
                        current = ([], False)
                        subgraphs.append(current)
                    current[0].append(i)
                else:
                    current = None
            ok = failed is None
            return ok, [(idx, ok) for idx, _ in subgraphs]

        if v2:
            def supports_model_v2(self, model, path=None):
                ok, self._subgraphs = self._check(model)
                if not ok and len(self._subgraphs) > 1:  # 10.x judges each subgraph: say the first one parses
                    self._subgraphs[0] = (self._subgraphs[0][0], True)
                return ok

            @property
            def num_subgraphs(self):
                return len(self._subgraphs)

            def get_subgraph_nodes(self, index):
                return self._subgraphs[index][0]

            def is_subgraph_supported(self, index):
                return self._subgraphs[index][1]
        else:
            def supports_model(self, model, path=None):
                return self._check(model)

    trt.OnnxParser = Parser
    return trt


def pid():
    return os.getpid()


def print_then_return(text):
    print(text, flush=True)
    return text


def cwd():
    return os.getcwd()


def recording_fake_trt(record_path, version="8.6.0"):
    """``fake_trt``, appending the pid of the process that asked for it to ``record_path`` (one line per call)."""
    with open(record_path, "a") as f:
        f.write(f"{os.getpid()}\n")
    return fake_trt(version)


def recording_crashing_fake_trt(record_path, version="8.6.0", crash_op="Where"):
    with open(record_path, "a") as f:
        f.write(f"{os.getpid()}\n")
    return crashing_fake_trt(version, crash_op)


def env(name):
    return os.environ.get(name)
