"""Build progress from TensorRT's builder log: layers costed out of the total, timing-cache answers, ETA."""

from __future__ import annotations

from pathlib import Path

from tests import models
from tests.fakes.fake_trt import make_fake_trt
from trtkit.builder import BuildConfig, build
from trtkit.builder.progress import BuildProgress

LOG = Path(__file__).parent.parent / "data" / "trt86_builder_verbose.log"
SEVERITY = {"V": "VERBOSE", "I": "INFO"}


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_recorded_86_log_gives_layers_cache_hits_and_an_eta():
    clock, events = Clock(), []
    tracker = BuildProgress(events.append, clock=clock)
    tracker.phase("build")
    for line in LOG.read_text().splitlines():
        severity, message = line.split("|", 1)
        clock.now += 0.5 if "Computing costs" in message else 0.0
        tracker.log(SEVERITY[severity], message)
    with_layers = [e for e in events if e.layers_done]
    assert [e.layers_done for e in with_layers] == [1, 2, 3, 4, 4]
    first = with_layers[0]
    # layer 1 closed when layer 2 started, 0.5 s after the first: 3 layers left at 0.5 s each
    assert first.layers_total == 4 and first.eta_s == 1.5 and first.timed == 1 and first.cached == 0
    last = events[-1]
    assert (last.layers_done, last.timed, last.cached, last.eta_s) == (4, 3, 1, 0.0)  # /conv2/Conv: cache
    assert last.line() == "build 2.0 s: 4/4 layers (3 timed, 1 cached), ETA 0 s"


def test_events_before_tensorrt_says_anything_have_no_counts():
    events = []
    tracker = BuildProgress(events.append, clock=Clock())
    tracker.phase("parse")
    assert events[-1].layers_done is None and events[-1].eta_s is None and events[-1].line() == "parse 0.0 s"


def test_build_on_progress_receives_phases_and_layers_while_on_log_keeps_its_severity():
    events, logs = [], []
    model = models.tiny_conv(dynamic_batch=False)
    build(model, BuildConfig(profiling_verbosity="NONE"), trt=make_fake_trt(), on_progress=events.append,
          on_log=lambda s, m: logs.append(s), log_severity="WARNING")
    assert [e.phase for e in events][:3] == ["prepare", "parse", "configure"]
    assert events[-1].phase == "inspect" and events[-1].layers_done == events[-1].layers_total == 3
    assert any(e.phase == "build" and e.layers_done == 1 and e.eta_s is not None for e in events)
    assert "VERBOSE" not in logs


def test_the_cli_shows_phase_layers_and_eta_on_a_terminal():
    import io

    from rich.console import Console

    from trtkit.builder.progress import ProgressEvent
    from trtkit.cli.build import BuildProgress as Display

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with Display(console, "m.onnx") as display:
        display.update(ProgressEvent("build", 3.0, 2, 8, 2, 0, 9.0, "/conv"))
        display._progress.refresh()
    text = out.getvalue()
    assert "m.onnx: build" in text and "2/8 layers, 0 cached, ETA 9 s" in text


def _feed(lines, phases=("build",)):
    clock, events = Clock(), []
    tracker = BuildProgress(events.append, clock=clock)
    tracker.phase(phases[0])
    for line in lines:
        clock.now += 0.5
        tracker.log("VERBOSE", line)
    for name in phases[1:]:
        tracker.phase(name)
    return events


def test_logs_without_costs_lines_or_names_or_an_end_line_still_count_every_layer():
    # the recorded log's lines, as another TensorRT build may write them: no "Computing costs" lines (each new layer
    # a timing runner names is the next layer; reformat runners are not layers)
    lines = [line.split("|", 1)[1] for line in LOG.read_text().splitlines()]
    runners_only = [line for line in lines if "Computing costs" not in line]
    assert "Optimizer Reformat" not in " ".join(runners_only)  # (the recorded log has none: add one)
    runners_only.insert(9, "--------------- Timing Runner: Optimizer Reformat(x -> y) (Reformat)")
    events = _feed(runners_only)
    assert [e.layers_done for e in events if e.layers_done][:3] == [1, 2, 3]
    last = events[-1]
    assert (last.layers_done, last.layers_total, last.timed, last.cached) == (4, 4, 3, 1)
    # "Computing costs for" with the name on the message's next line, or none
    unnamed = [line.replace("Computing costs for ", "Computing costs for \n") if i % 2 else
               line.replace("Computing costs for ", "Computing costs for") for i, line in enumerate(lines)]
    last = _feed(unnamed)[-1]
    assert (last.layers_done, last.layers_total, last.timed, last.cached) == (4, 4, 3, 1)
    # no "Formats and tactics selection completed" line: "After reformat layers" ends the count
    last = _feed([line for line in lines if not line.startswith("Formats and tactics")])[-1]
    assert (last.layers_done, last.layers_total) == (4, 4) and last.eta_s == 0.0
    # neither: the end of the build phase does, the layers never named counted as answered without timing
    head = [line for line in lines if not line.startswith(("Formats and tactics", "After reformat"))]
    head = head[: next(i for i, line in enumerate(head) if "/fc/Gemm" in line)]  # the log stops before /fc/Gemm
    events = _feed(head, phases=("build", "inspect"))
    last = events[-1]
    assert last.phase == "inspect" and (last.layers_done, last.layers_total, last.timed, last.cached) == (4, 4, 2, 2)
