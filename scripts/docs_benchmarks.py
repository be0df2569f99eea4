#!/usr/bin/env python3
"""The benchmark pages of the documentation site, generated from ``benchmarks/results/*.json``.

One page per kind of benchmark (``KINDS``: runner, precision, ...), a section per results file of that kind, its
tables read from the file and nothing else. Every table is followed by its provenance: the GPU, the TensorRT version,
the date and the command, as far as the file records them; what a file does not record is said to be not recorded
(the page never fills it in). A kind's page is there whether its files are or not, so links to it hold; a file no
renderer knows gets a page of its recorded figures; partial re-runs (``*-check.json``) and ``SKIP`` get none.

``scripts/mkdocs_hooks.py`` calls :func:`pages` while ``mkdocs build`` runs. To look at the Markdown itself:
``python scripts/docs_benchmarks.py OUT_DIR``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SKIP = {"grpc-client-cost-cpu.json"}
MISSING = "not recorded"


# ---------------------------------------------------------------------------------------------------- formatting


def fmt(value) -> str:
    """A figure as a table shows it: 4 significant digits, thousands separated, '—' for none."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}".replace(",", " ")
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}".replace(",", " ")
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {fmt(v)}" for k, v in value.items())
    return str(value).replace("|", "\\|")


def get(data, path: str, default=None):
    """``data["a"]["b"]`` for ``"a.b"``; ``default`` where any step is missing."""
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data


def table(header: list, rows: list, labelled: bool = True) -> list:
    """Markdown table lines; rows whose figures (all but a label in the first column) are missing are left out."""
    rows = [r for r in rows if any(v is not None for v in r[1 if labelled else 0 :])]
    if not rows:
        return []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return lines + [""]


def when(stamp) -> str:
    """``2026-12-01T21:12:22Z`` or ``2026-12-01 21:12:22 UTC`` as ``2026-12-01 21:12 UTC``."""
    text = str(stamp).replace("T", " ").replace("Z", "").replace(" UTC", "")
    return text[:16] + " UTC"


# ---------------------------------------------------------------------------------------------------- provenance


@dataclass
class Provenance:
    """What a results file records about where, when and how it was measured."""

    gpu: str
    tensorrt: str
    date: str
    command: str

    def line(self) -> str:
        return f"*GPU: {self.gpu} · TensorRT: {self.tensorrt} · date: {self.date} · command: {self.command}*"


def provenance(data: dict, script: str, anchor: str = "runs") -> Provenance:
    env = data.get("environment") or {}
    gpu = data.get("gpu") or env.get("gpu")
    trt = data.get("tensorrt") or env.get("tensorrt")
    runs = [c for c in data.get("calls") or [] if isinstance(c, dict)]
    stamps = [c["started"] for c in runs if c.get("started")]
    stamps = stamps or [data[k] for k in ("date", "started") if data.get(k)][:1]
    if len(stamps) > 1:
        date = f"{when(min(stamps))} to {when(max(stamps))} ({len(stamps)} runs merged)"
    else:
        date = when(stamps[0]) if stamps else MISSING
    argvs = [c["argv"] for c in runs if c.get("argv")] or ([data["argv"]] if data.get("argv") else [])
    if data.get("command"):
        command = f"`{data['command']}`"
    elif len(runs) > 1:
        command = f"`python {script}` (each run's arguments: [Runs](#{anchor}))"
    elif argvs:
        command = f"`python {script} {shlex.join(argvs[0])}`"
    elif script != MISSING:
        command = f"{MISSING} (the file is written by `python {script}`)"
    else:
        command = MISSING
    return Provenance(gpu or MISSING, trt or MISSING, date, command)


def runs_section(data: dict, script: str, anchor: str = "runs") -> list:
    """The runs merged into one file: when each started and its command (or the settings it recorded)."""
    runs = [c for c in data.get("calls") or [] if isinstance(c, dict)]
    if len(runs) < 2:
        return []
    rows = []
    for run in runs:
        if run.get("argv"):
            how = f"`python {script} {shlex.join(run['argv'])}`"
        else:
            recorded = {k: v for k, v in run.items() if k not in ("started", "seconds", "total_seconds") and v}
            how = "command not recorded; settings: " + "; ".join(f"`{k}` {fmt(v)}" for k, v in recorded.items())
        rows.append([when(run["started"]) if run.get("started") else None, how])
    return [f"## Runs {{#{anchor}}}", "", "The runs whose figures this file merges.", "",
            *table(["started", "command"], rows)]


def settings_list(settings: dict, keys=None) -> list:
    """A bullet list of recorded settings (``keys``: only those, in that order)."""
    items = [(k, settings[k]) for k in (keys or settings) if k in settings and not isinstance(settings[k], dict)]
    return [f"- `{k}`: {fmt(v)}" for k, v in items] + ([""] if items else [])


# ---------------------------------------------------------------------------------------------------- renderers
#
# Each renderer takes a file's data and its Provenance and returns Markdown lines: sections of a heading, a sentence
# saying what is measured, a table and the provenance line. Columns are (header, dotted key) pairs.


def section(title: str, what: str, lines: list, prov: Provenance) -> list:
    return [f"## {title}", "", what, "", *lines, prov.line(), ""] if lines else []


def keyed(first: str | None, columns: tuple, rows: list) -> list:
    """A table of ``rows`` (``(label, dict)`` pairs), one column per ``(header, dotted key)`` of ``columns``; with
    ``first=None``, no label column."""
    if first is None:
        return table([h for h, _ in columns], [[get(d, k) for _, k in columns] for _, d in rows], labelled=False)
    return table([first, *(h for h, _ in columns)], [[name, *(get(d, k) for _, k in columns)] for name, d in rows])


RUNNER_LATENCY = (
    ("floor: one CUDA graph with copies", "floor_ms"),
    ("GPU compute only", "floor_compute_ms"),
    ("TrtRunner, CUDA graph", "trtkit_graph_ms"),
    ("TrtRunner, no graph", "trtkit_ms"),
    ("TrtRunner, device-resident I/O", "trtkit_device_ms"),
    ("Polygraphy TrtRunner", "polygraphy_ms"),
    ("cuda-python loop", "loop_ms"),
    ("cuda-python loop in a graph", "loop_graph_ms"),
    ("PyTorch eager FP32", "torch_eager_ms"),
    ("torch.compile FP16", "torch_compile_ms"),
    ("`trtkit bench` GPU compute", "bench_gpu_compute_ms"),
)
RUNNER_INPUTS = (
    ("array passed again (page-locked in place)", "trtkit_graph_ms"),
    ("a new array each call (copied, or sent from its own memory from 1 MiB)", "trtkit_graph_copy_ms"),
    ("filled in place (`host_inputs()`)", "trtkit_graph_pinned_ms"),
    ("outputs as views", "trtkit_graph_views_ms"),
)
RUNNER_COPIES = (("1 thread", "host_copy_1t_ms"), ("4 threads", "host_copy_4t_ms"), ("8 threads", "host_copy_8t_ms"))
RUNNER_STEPS = (
    ("whole call", "breakdown_us.infer"),
    ("input copy", "breakdown_us.copy_in"),
    ("launch", "breakdown_us.launch"),
    ("synchronize", "breakdown_us.sync"),
    ("output copy", "breakdown_us.copy_out"),
)


def render_runner(data: dict, prov: Provenance) -> list:
    batches = data.get("batches") or sorted(int(k) for k in data if k.isdigit())
    rows = [(b, {**get(data, f"extra.{b}", {}), **data.get(str(b), {})}) for b in batches]
    engine = data.get("engine") or {}
    memory = (("device memory growth, bytes", "leak_bytes_device"), ("host memory growth, bytes", "leak_bytes_host"),
              ("mean ms a call", "leak_mean_call_ms"))
    intro = [f"Engine: {fmt(engine.get('precision'))}, profile {fmt(engine.get('profile'))}. Every latency anchor "
             "of a batch is open at once and measured in interleaved rounds; each is given the same input array "
             "call after call. Medians.", ""]
    return (
        intro
        + section("Latency of one call, ms", "numpy in, numpy out unless the column says otherwise.",
                  keyed("batch", RUNNER_LATENCY, rows), prov)
        + section("How numpy inputs travel, ms", "`TrtRunner` with CUDA graphs; one way per column.",
                  keyed("batch", RUNNER_INPUTS, rows), prov)
        + section("Host copy of the input, ms", "Copying the batch into pinned memory, split over threads.",
                  keyed("batch", RUNNER_COPIES, rows), prov)
        + section("Where one call's time goes, µs", "The steps of a call made by hand.",
                  keyed("batch", RUNNER_STEPS, rows), prov)
        + section("Memory over many calls", "Growth of device memory and host RSS.",
                  keyed("calls", memory, [(data.get("leak_calls"), data)]), prov)
    )


PRECISION_LABELS = {
    "onnx": "ONNX model (onnxruntime, reference)",
    "fp32": "FP32 (TF32)",
    "fp16": "FP16 (`--fp16`)",
    "fp16_flag": "FP16, builder flag",
    "fp16_cast": "FP16, model cast (`--fp16-mode cast`)",
    "int8_calibrator": "INT8, TensorRT's calibrator (entropy)",
    "int8_calibrator_entropy": "INT8, TensorRT's calibrator, entropy",
    "int8_calibrator_minmax": "INT8, TensorRT's calibrator, min-max",
    "int8_calibrator_cached": "INT8, TensorRT's calibrator, from its cache",
    "int8_qdq": "INT8 Q/DQ made by trtkit (`--int8-mode qdq`)",
    "int8_qdq_heads": "INT8 Q/DQ, `--qdq-quantize-heads`",
}


def label(key: str) -> str:
    return PRECISION_LABELS.get(key, f"`{key}`")


def ordered(rows: dict) -> list:
    """``rows.items()`` in the order of ``PRECISION_LABELS`` (unknown keys last, by name)."""
    order = list(PRECISION_LABELS)
    return sorted(rows.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))


def shares(share: dict | None) -> str | None:
    if not share:
        return None
    return ", ".join(f"{k} {v:.2%}" for k, v in sorted(share.items(), key=lambda kv: -kv[1]) if v)


def render_precision(data: dict, prov: Provenance) -> list:
    ips, raw = data.get("resnet50_images_per_s") or {}, data.get("raw_api_images_per_s") or {}
    batches = sorted({b for v in ips.values() for b in v}, key=int)
    share, last = data.get("resnet50_precision_share") or {}, batches[-1:]
    resnet = table(
        ["ResNet-50", *(f"batch {b}" for b in batches), *(f"raw API twin, batch {b}" for b in last),
         "layers by precision (FLOPs)"],
        [[label(k), *(v.get(b) for b in batches), *(get(raw, f"{k}.{b}") for b in last), shares(share.get(k))]
         for k, v in ordered(ips)],
    )
    calib = data.get("calibration_seconds") or {}
    builds = (("calibrating", "first"), ("from the calibration cache", "cached"), ("Q/DQ (trtkit)", "qdq_first"),
              ("Q/DQ, heads quantized", "qdq_heads_first"))
    digit_share = data.get("digits_precision_share") or {}
    digits = table(["digits CNN", "top-1 %", "layers by precision (FLOPs)"],
                   [[label(k), v, shares(digit_share.get(k))] for k, v in ordered(data.get("digits_top1") or {})])
    keys = ["resnet50_profile", "calib_images", "int8_flags", "throughput", "tactic_sources"]
    return (
        settings_list(data.get("settings") or {}, keys)
        + section("ResNet-50 throughput, images/s", "Each trtkit engine next to its twin built with the raw TensorRT "
                  "API and the same settings, CUDA graph replay.", resnet, prov)
        + section("Calibration time", f"Whole INT8 builds over {fmt(calib.get('calib_images'))} calibration images, "
                  "in seconds.", keyed("INT8 build, s", builds, [("ResNet-50", calib)]), prov)
        + section("Digits classifier accuracy", "Real data, held-out images.", digits, prov)
    )


DETECTOR = (
    ("mAP@[.5:.95]", "map"),
    ("mAP@.5", "map50"),
    ("engine MB", "engine_mb"),
    ("batch 1 ms", "b1_ms"),
    ("batch 8 ms", "b8_ms"),
    ("batch 8 graph ms", "b8_graph_ms"),
    ("batch 8 images/s", "b8_images_per_s"),
    ("build s", "build_s"),
    ("measured", "measured"),
)


def detector_rows(data: dict, name=label) -> list:
    """``(label, row)`` per engine row, each with the start of the last run that measured it (``measured``)."""
    measured = {r: when(run["started"]) for run in data.get("calls") or [] for r in run.get("rows") or []
                if run.get("started")}
    return [(name(k), {**r, "measured": measured.get(k)}) for k, r in ordered(data.get("rows") or {})]


def render_detection(data: dict, prov: Provenance) -> list:
    nms = (("images", "images"), ("boxes paired", "boxes_compared"), ("only in the plugin's", "only_plugin"),
           ("only in numpy's", "only_numpy"), ("min IoU", "min_iou"), ("mean IoU", "mean_iou"))
    latency = (("input", "input"), ("letterbox", "letterbox"), ("pre ms", "pre_ms"), ("infer ms", "infer_ms"),
               ("post ms", "post_ms"), ("total ms", "total_ms"),
               ("engine alone (`TrtRunner.infer`) ms", "engine_e2e_ms"))
    samples = [(s.get("engine"), s) for k, s in sorted(data.items()) if k.startswith("sample_latency")]
    what = (f"`{Path(str(data.get('model', ''))).name}` on the generated validation images, scored with "
            f"pycocotools; profile `{fmt(data.get('profile'))}`, builder optimization level "
            f"{fmt(data.get('optimization_level'))}; GPU time per batch from `trtkit bench`, images/s at batch 8 "
            "with CUDA graphs.")
    return (
        section("Accuracy and speed by precision", what, keyed("engine", DETECTOR, detector_rows(data)), prov)
        + section("EfficientNMS in the engine against the numpy decode", "The same FP32 head decoded both ways, "
                  "boxes paired by class and IoU.", keyed(None, nms, [("", data.get("nms_match") or {})]), prov)
        + section("The sample's latency per image, batch 1", "`samples/detection`'s detector: decoded RGB arrays in, "
                  "detections in original pixels out; medians.", keyed("engine", latency, samples), prov)
    )


def render_qdq_placement(data: dict, prov: Provenance) -> list:
    variants, vs = data.get("variants") or {}, data.get("vs_fp16") or {}

    def name(key):
        options = variants.get(key)
        if key == "fp16" or options is None:
            return label(key)
        return "INT8 Q/DQ: " + (", ".join(f"`{k}={v}`" for k, v in options.items()) or "options off")

    rows = [(n, {**r, "vs": get(vs, f"{k}.b8_images_per_s_vs_fp16")})
            for k, (n, r) in zip(dict(ordered(data.get("rows") or {})), detector_rows(data, name))]
    what = ("The detector's INT8 Q/DQ engines, one `BuildConfig` option set each, against FP16 built and timed in "
            f"the same run; {fmt(data.get('calib_images'))} calibration images.")
    return section("Q/DQ placements against FP16", what,
                   keyed("engine", DETECTOR + (("images/s vs FP16", "vs"),), rows), prov)


def render_qdq_proxy(data: dict, prov: Provenance) -> list:
    columns = (("val images", "val_images"), ("calibration images", "calib_images"), ("mAP@[.5:.95]", "map"),
               ("mAP@.5", "map50"), ("plan", "plan"))
    rows = [(r.get("candidate"), r) for r in data.get("rows") or []]
    return section("INT8 Q/DQ recipes scored on a CPU", fmt(data.get("what")),
                   keyed("recipe (placement:algorithm)", columns, rows), prov)


def render_pipeline(data: dict, prov: Provenance) -> list:
    settings = data.get("settings") or {}
    video = (("frames", "frames_out"), ("frames/s", "e2e_fps"), ("vs the encoder alone", "paired.ratio_median"),
             ("cores busy", "cpu.process_cores"))
    videos = [(n, data[k]) for n, k in (("PyAV decode (CPU)", "video"), ("NVDEC, frames on the GPU",
                                                                          "video_nvdec_device")) if k in data]
    alone = data.get("stages_alone_fps") or {}
    folder = (("images", "images"), ("images/s", "images_per_s"), ("slowest stage", "slowest_stage"))
    folders = [(f"letterbox on the {str(get(data, f'{k}.preprocess.on')).upper()}", data[k])
               for k in ("folder", "folder_cpu_preprocess") if k in data]
    infer = (("inference stage frames/s", "fps"), ("`trtkit bench` items/s", "bench_fps"), ("ratio", "ratio"))
    nvdec = (("frames/s", "fps"), ("vs PyAV", "speedup"))
    bound = get(data, "nvdec.gpu_bound") or {}
    gpu_bound = (("`trtkit bench` frames/s", "bench_fps"), ("ratio", "ratio_to_bench"),
                 ("GPU idle between batches %", "idle_between_batches_pct"), ("decoders", "decoders"))
    mem = data.get("memory_run") or {}
    growth = (("frames out", "frames_out"), ("device memory growth, bytes", mem.get("leak_measured_by", "-")))
    shape = "×".join(str(v) for v in settings.get("video") or []) + f", {fmt(settings.get('video_frames'))} frames"
    return (
        section("Video file", f"H.264 video ({shape}) → letterbox → CNN FP16 → libx264, each stage on its own "
                "thread; the ratio is against the encoder alone on the same frames.", keyed("decoder", video, videos),
                prov)
        + section("Each stage alone", "Frames/s of every stage run by itself on the same video.",
                  table(["stage alone", *alone], [["frames/s", *alone.values()]] if alone else []), prov)
        + section("Image folder", "Decode, letterbox on the GPU or the CPU, infer.",
                  keyed("image folder", folder, folders), prov)
        + section("Inference stage", "Pre-processed batches through the pipeline's inference stage against "
                  "`trtkit bench` of the same engine.", keyed(None, infer, [("", data.get("infer_stage") or {})]), prov)
        + section("One video over several NVDEC decoders", "Frames in order; speed against PyAV's decoder.",
                  keyed("NVDEC decoders", nvdec, list((get(data, "nvdec.capacity.decoders") or {}).items())), prov)
        + section("A pipeline where the GPU is the slowest stage", fmt(bound.get("note")),
                  keyed("frames/s", gpu_bound, [(bound.get("e2e_fps"), bound)] if bound else []), prov)
        + section("Memory over a long run", "Device memory sampled while the pipeline runs.",
                  keyed("frames in", growth, [(mem.get("frames_in"), mem)] if mem else []), prov)
    )


def render_serve(data: dict, prov: Provenance) -> list:
    keys = ["backend", "instances", "max_queue_delay_us", "preferred_batch", "tensorrt_options", "graph_batches",
            "shared_memory", "input_uint8", "cpus"]
    engine = data.get("engine") or {}
    levels = (("images/s", "ips"), ("p50 ms", "p50_ms"), ("p90 ms", "p90_ms"), ("p99 ms", "p99_ms"),
              ("server queue µs", "server_us.queue"), ("server compute µs", "server_us.compute_infer"))
    loads = sorted(((int(c), v) for c, v in (get(data, "perf_analyzer.concurrency") or {}).items()))
    other = (("engine alone, `trtkit bench --streams 2`, images/s", "bench_streams2_ips"),
             ("soak requests", "soak.requests"), ("failed", "soak.failed"),
             ("device memory growth, bytes", "soak.leak_bytes_device"), ("ready s after the engines loaded", "ready_s"))
    what = (f"`trtkit serve` of a {fmt(engine.get('precision'))} engine (input {fmt(get(engine, 'input.dtype'))} "
            f"{fmt(get(engine, 'input.shape'))}), loaded by perf_analyzer {fmt(get(data, 'perf_analyzer.version'))} "
            "over gRPC, batch 1 a request.")
    return (
        settings_list(data.get("settings") or {}, keys)
        + section("Throughput and latency by load", what, keyed("requests in flight", levels, loads), prov)
        + section("Engine alone, soak and start-up", "The same engine without the server, a long run of requests, "
                  "and the time to ready.", keyed(None, other, [("", data)]), prov)
    )


def render_build_overhead(data: dict, prov: Provenance) -> list:
    columns = (("raw API script s", "raw_s"), ("`trtkit build` s", "trtkit_s"), ("ratio", "ratio"),
               ("profile batch min/opt/max", "batch"))
    what = f"{fmt(data.get('note'))}; {fmt(data.get('repeats'))} repeat(s)."
    return section("`trtkit build` against a raw TensorRT script", what,
                   keyed("model", columns, list((data.get("models") or {}).items())), prov)


def render_onnx_backend(data: dict, prov: Provenance) -> list:
    sys.path.insert(0, str(ROOT / "scripts"))
    import onnx_backend_suite

    adapters = [a for a in ("raw", "trtkit") if a in (data.get("summary") or {})]
    text = onnx_backend_suite.support_markdown(data, adapters).split("\n", 2)[2]
    return ["## Cases by op", "", text, prov.line(), ""]


COMPARE_COLUMNS = (
    ("precision", "precision"), ("batch", "batch"), ("mode", "mode"), ("mean ms", "mean_ms"), ("std ms", "std_ms"),
    ("p99 ms", "p99_ms"), ("images/s", "images_per_s"), ("GPU ms/image", "gpu_ms_per_image"),
    ("speed-up", "speedup"), ("engine MB", "engine_mb"), ("device MB", "device_memory_mb"),
)


def render_compare(data: dict, prov: Provenance) -> list:
    """A ``trtkit compare --json`` file: its rows, accuracy beside them, rows not available with their reason."""
    rows = [r for r in data.get("rows", []) if r.get("available", True)]
    metric = next((k for r in rows for k in (r.get("accuracy") or {}) if isinstance(r["accuracy"][k], float)), None)
    columns = COMPARE_COLUMNS + ((metric, f"accuracy.{metric}"),) if metric else COMPARE_COLUMNS
    lines = keyed(None, columns, [(None, r) for r in rows])
    ref = get(data, f"reference.{metric}") if metric else None
    what = f"Speed-ups over {fmt(data.get('baseline'))}." + (f" The ONNX model scores {fmt(ref)}." if ref else "")
    gone = [f"- {r['precision']}: {r['reason']}" for r in data.get("rows", []) if not r.get("available", True)]
    model = Path(str(data.get("model", ""))).name
    return section(f"`{model}`", what, lines + (["Not available:", *gone, ""] if gone else []), prov)


def render_models(data: dict, prov: Provenance) -> list:
    """Seed models through ``trtkit build``, ``trtkit parity`` and a stream (``scripts/seed_models_gpu.py``)."""
    models = data.get("models") or {}
    precisions = sorted({p for m in models.values() for p in m.get("build", {})}, key="fp32 fp16 int8".find)
    header = ["model", *(f"build {p}" for p in precisions), "parity FP32", "stream"]
    rows = [[f"`{n}`", *(m.get("build", {}).get(p) for p in precisions), m.get("parity_fp32"), m.get("stream")]
            for n, m in models.items()]
    return section("Models", "Each model exported as its library exports it, with random weights.",
                   table(header, rows), prov)


REAL_STAGES = (("prepare", "prepare.status"), ("prepare FP16", "prepare.fp16.status"), ("raw API", "raw.status"),
               ("trtkit FP32", "trtkit_fp32.status"), ("trtkit FP16", "trtkit_fp16.status"))


def render_real_models(data: dict, prov: Provenance) -> list:
    """``scripts/real_models.py``: the summary, then every case and each stage's verdict; failures with their error."""
    models = data.get("models") or {}
    stages = [(h, k) for h, k in REAL_STAGES if any(get(m, k) for m in models.values())]
    counts = data.get("summary") or {}
    summary = keyed(None, tuple((k.replace("_", " "), k) for k in counts), [(None, counts)]) if counts else []
    rows = [[f"`{n}`", m.get("library"), m.get("exporter"), m.get("opset"), get(m, "export.status"),
             "pass" if m.get("ort_runs") else "fail", *(get(m, k) for _, k in stages)] for n, m in models.items()]
    errors = [f"- `{n}` {h}: {fmt(get(m, k[: -len('.status')] + '.error'))}" for n, m in models.items()
              for h, k in [("export", "export.status"), *stages] if get(m, k) == "fail"]
    header = ["model", "library", "exporter", "opset", "export", "onnxruntime", *(h for h, _ in stages)]
    what = "Each model exported by its library with random weights, then run by each stage on one seeded input."
    return (section("Summary", what, summary, prov)
            + section("Cases", "`skip`: the stage had nothing to run (the export or onnxruntime failed).",
                      table(header, rows) + (["Failures:", "", *errors, ""] if errors else []), prov))


def render_timing_cache(data: dict, prov: Provenance) -> list:
    rows = [("same model, second build", {"a": get(data, "same_model.first_s"), "b": get(data, "same_model.second_s"),
                                         "x": get(data, "same_model.speedup")}),
            ("sibling after the model", {"a": get(data, "same_family.cold_s"), "b": get(data, "same_family.warm_s"),
                                        "x": get(data, "same_family.speedup")})]
    models = data.get("models") or {}
    what = (f"`{fmt(models.get('model'))}`, then `{fmt(models.get('sibling'))}`, {fmt(models.get('precision'))}; "
            "seconds of `trtkit build`, without and with the default timing cache.")
    return section("Build time", what, keyed("build", (("cold s", "a"), ("with the cache s", "b"),
                                                         ("faster", "x")), rows), prov)


def render_live(data: dict, prov: Provenance) -> list:
    settings = data.get("settings") or {}
    shape = "×".join(str(v) for v in settings.get("video") or []) + f" at {fmt(settings.get('fps'))} fps"
    one = (("frames/s", "fps"), ("source frames/s", "source_fps"), ("p99 latency ms", "p99_latency_ms"),
           ("dropped", "dropped"))
    four = data.get("four_streams") or {}
    each = [(f"stream {i}", {"fps": fps, "dropped": get(four, "dropped_each", [None] * 4)[i],
                             "p99": get(four, "p99_latency_ms_each", [None] * 4)[i]})
            for i, fps in enumerate(four.get("fps_each") or [])]
    over = (("source frames/s", "source_fps"), ("capacity frames/s", "capacity_fps"), ("frames out", "frames_out"),
            ("dropped", "dropped"), ("p99 latency ms", "p99_latency_ms"))
    what = (f"H.264 {shape} published over RTMP by its own process to `trtkit run --listen --post detection`, "
            "the annotated stream pushed over RTMP to a receiver; latency from a frame's arrival to its output.")
    return (
        section("One stream", what, keyed(None, one, [("", data.get("single") or {})]), prov)
        + section("Four streams at once", f"Four such sources in one `trtkit run`, decoded by "
                  f"{fmt(four.get('decoder'))}.", keyed("stream", (("frames/s", "fps"), ("dropped", "dropped"),
                                                                  ("p99 latency ms", "p99")), each), prov)
        + section("A source faster than the pipeline", "A source at four times the pipeline's capacity (its "
                  "frames/s on the clip as a file), `--drop oldest`.", keyed(None, over, [("", data.get("overload")
                                                                                        or {})]), prov)
    )


def render_recorded(data: dict, prov: Provenance) -> list:
    """A results file no renderer knows: its figures as recorded, two levels deep."""
    rows = []
    for key, value in data.items():
        if key not in ("errors", "notes", "timings_s", "environment"):
            for sub, v in value.items() if isinstance(value, dict) else [("", value)]:
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    rows.append([f"`{key}.{sub}`" if sub else f"`{key}`", v])
    return section("Recorded figures", "The file's figures, as recorded.", table(["key", "value"], rows), prov)


@dataclass
class Kind:
    """A kind of results file: the name it starts with, its page, the script writing it, its renderer."""

    prefix: str
    title: str
    what: str
    script: str
    render: Callable[[dict, Provenance], list]


KINDS = (
    Kind("runner", "Runner", "`TrtRunner` against the GPU's own floor, Polygraphy, a hand-written cuda-python loop "
         "and PyTorch, on ResNet-50.", "benchmarks/runner_vs_anchors.py", render_runner),
    Kind("precision", "Precision", "FP32, FP16 and INT8 engines next to twins built with the raw TensorRT API; "
         "calibration time; accuracy on a real classifier.", "benchmarks/precision_h200.py", render_precision),
    Kind("detection", "Detection", "The sample detector through every precision: COCO mAP, speed, engine size, the "
         "NMS plugin and the sample's latency.", "benchmarks/detection_h200.py", render_detection),
    Kind("qdq-placement", "Q/DQ placement", "Where the Q/DQ model's quantization goes, and what each choice does "
         "to speed and mAP.", "benchmarks/qdq_placement_h200.py", render_qdq_placement),
    Kind("qdq-proxy", "Q/DQ recipes", "Calibration algorithms and placements for the sample detector, each Q/DQ "
         "model scored in ONNX Runtime.", "scripts/qdq_proxy.py", render_qdq_proxy),
    Kind("pipeline", "Pipelines", "Video files and image folders streamed through an engine: each stage alone and "
         "together, NVDEC, memory.", "benchmarks/pipeline_h200.py", render_pipeline),
    Kind("serve", "Serving", "Engines served by `trtkit serve` on Triton, loaded by perf_analyzer.",
         "benchmarks/serve_h200.py", render_serve),
    Kind("build-overhead", "Build overhead", "`trtkit build` with its defaults against a raw TensorRT script.",
         "benchmarks/build_overhead.py", render_build_overhead),
    Kind("onnx-backend", "ONNX backend test data", "Every case of the onnx wheel's backend test data through the raw "
         "TensorRT API and through trtkit.", "scripts/onnx_backend_suite.py", render_onnx_backend),
    Kind("compare", "Compare tables", "`trtkit compare` on models exported from the libraries users export from: "
         "precisions and batch sizes side by side.", "trtkit compare", render_compare),
    Kind("detectors", "Detectors", "The seed systems' detectors (YOLO family, RT-DETR, RF-DETR) built, checked "
         "against the ONNX model (trtkit parity) and streamed.", "scripts/seed_models_gpu.py", render_models),
    Kind("pose", "Pose models", "Heatmap and YOLOv8-pose models built, checked against the ONNX model and streamed.",
         "scripts/seed_models_gpu.py", render_models),
    Kind("live", "Live streams", "Streams published at their own pace to `trtkit run --listen`, detected and pushed "
         "on: frames/s, latency and drops for one, four and an overloading source.", "benchmarks/live_h200.py",
         render_live),
    Kind("real-models", "Real models", "Models exported from timm, torchvision, transformers, ultralytics, rfdetr and "
         "lightning-pose, through onnxruntime, trtkit's prepare, the raw TensorRT API and trtkit.",
         "scripts/real_models.py", render_real_models),
    Kind("timing-cache", "Timing cache", "What the default timing cache saves on a second build.",
         "benchmarks/timing_cache_h200.py", render_timing_cache),
)


def kind_of(name: str) -> Kind | None:
    return next((k for k in KINDS if name.startswith(k.prefix + "-")), None)


def result_files(results: Path = RESULTS) -> list:
    """The results files that get a page (partial re-runs ``*-check.json`` and ``SKIP`` do not)."""
    return [p for p in sorted(results.glob("*.json")) if p.name not in SKIP and not p.stem.endswith("-check")]


def file_section(path: Path, kind: Kind | None) -> list:
    """Markdown of one results file: what it records, its tables, each with its provenance, and its runs."""
    data = json.loads(path.read_text())
    script = kind.script if kind else MISSING
    anchor = f"runs-{path.stem}"
    prov = provenance(data, script, anchor)
    lines = [f"From `benchmarks/results/{path.name}`.", ""]
    if data.get("errors"):
        lines += [f"The run recorded errors for: {', '.join(f'`{k}`' for k in data['errors'])}.", ""]
    render = kind.render if kind else render_recorded
    return lines + render(data, prov) + runs_section(data, script, anchor)


def _demote(lines: list) -> list:
    return ["#" + line if line.startswith("## ") else line for line in lines]


def pages(results: Path = RESULTS) -> dict:
    """``{path under docs/: Markdown}``: ``benchmarks/index.md``, a page per kind, a page per unknown file.

    A kind's page exists whether or not its files do, so links to it never break; it has a section per file.
    """
    files = result_files(results)
    index = ["# Benchmarks", "", "Every figure of this documentation is on these pages, generated from the JSON files "
             "in `benchmarks/results/` when the site is built. Each table names the GPU, the TensorRT version, the "
             "date and the command of its run, as far as the file records them. How to run the benchmarks: "
             "[Contributing](../contributing.md#benchmarks).", ""]
    out = {}
    for kind in KINDS:
        mine = [p for p in files if kind_of(p.name) is kind]
        body = [f"# {kind.title}", "", kind.what, ""]
        if not mine:
            body += [f"No results file of this benchmark is present (`benchmarks/results/{kind.prefix}-*.json`).", ""]
        for path in mine:  # several machines' files: a section each
            body += [f"## {path.stem}", "", *_demote(file_section(path, kind))] if len(mine) > 1 else \
                file_section(path, kind)
        out[f"benchmarks/{kind.prefix}.md"] = "\n".join(body).rstrip() + "\n"
        index.append(f"- [{kind.title}]({kind.prefix}.md): {kind.what}")
    for path in files:
        if kind_of(path.name) is None:
            out[f"benchmarks/{path.stem}.md"] = "\n".join([f"# {path.stem}", "", *file_section(path, None)]) + "\n"
            index.append(f"- [{path.stem}]({path.stem}.md)")
    return {"benchmarks/index.md": "\n".join(index) + "\n", **out}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write the generated benchmark pages to a folder, to read them.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    for rel, text in pages(args.results).items():
        target = args.out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
