"""``trtkit run ENGINE --video in.mp4 --out out.mp4`` and ``trtkit run ENGINE --images DIR``: the streaming
pipeline's front end (options, a rich live view on a terminal, the final table, ``--json``)."""

from __future__ import annotations

from trtkit.errors import UsageError

POST_CHOICES = ("none", "detection", "pose")


def add_pipeline_arguments(parser) -> None:
    from trtkit.cli import options
    from trtkit.pipeline.video import DECODERS

    g = parser.add_argument_group("streaming pipeline (video files, live streams, cameras and image folders)")
    src = g.add_mutually_exclusive_group()
    src.add_argument(
        "--video",
        action="append",
        metavar="FILE|URL",
        help="run every frame of a video file, stream (rtsp://, rtmp://, http(s):// incl. HLS, udp://, tcp://, "
        "srt://) or camera (/dev/video0) through the engine; repeatable, or a .txt list of them, one a line: the "
        "sources run at once, each with its own report",
    )
    src.add_argument("--images", metavar="DIR", help="run every image of a folder through the engine (images/s)")
    src.add_argument(
        "--view",
        action="append",
        metavar="NAME=FILE",
        help="a multi-view model: one video per camera view, repeated, frame i of every view together (stops at "
        "the shortest); NAME is the engine input it feeds, or for one input (N, V, C, H, W) a label of the views "
        "in their order",
    )
    g.add_argument(
        "--out",
        action="append",
        metavar="PATH|URL",
        help="with --video: the output video (.mp4, .mkv, .mov, .avi), stream (rtmp://, rtsp://, udp://, srt://) or "
        "HLS playlist (.m3u8, its segments beside it), one per source; with --images: a folder for the (annotated) "
        "images; with --view: NAME=FILE, a video of that view",
    )
    g.add_argument(
        "--post",
        choices=POST_CHOICES,
        default="none",
        help="postprocessing: detection (decode, NMS, boxes drawn on the output), pose (heatmap or YOLOv8-pose "
        "keypoints and skeletons drawn) or none (raw outputs). RF-DETR and DETR detectors and heatmap pose models "
        "(Lightning Pose) usually want --normalize imagenet; YOLO and RT-DETR none",
    )
    options.add_normalize_option(g)
    g.add_argument(
        "--conf", type=float, default=0.25, metavar="P", help="detection and YOLOv8-pose: lowest score kept (0.25)"
    )
    g.add_argument(
        "--iou", type=float, default=0.45, metavar="T", help="detection and YOLOv8-pose: NMS IoU threshold (0.45)"
    )
    g.add_argument(
        "--skeleton",
        metavar="NAME|FILE",
        help="with --post pose: the lines drawn, coco17 or a JSON file of [a, b] keypoint index pairs (default: "
        "coco17 for 17 keypoints, else none)",
    )
    g.add_argument(
        "--min-confidence",
        type=float,
        default=0.5,
        metavar="P",
        help="with --post pose: keypoints drawn from this confidence (default 0.5)",
    )
    options.add_head_option(g)
    g.add_argument(
        "--names",
        metavar="FILE",
        help="with --post detection: the class names drawn on the boxes: one a line, a JSON list or dict, or "
        "a YAML file's names as in ultralytics' dataset files (default: the names in the model's metadata)",
    )
    g.add_argument(
        "--results",
        action="append",
        metavar="FILE.jsonl",
        help="save each frame's result (or raw outputs) as one JSON line (one file per source)",
    )
    g.add_argument(
        "--realtime",
        action="store_true",
        help="read video files at their frame rate, as a live stream arrives (streams and cameras always are)",
    )
    g.add_argument(
        "--drop",
        choices=("oldest", "newest", "none"),
        default="oldest",
        help="live sources: when inference falls behind, drop the oldest waiting frame, the newest one, or none "
        "(nothing lost, latency grows); drops are counted in the report (default oldest)",
    )
    g.add_argument(
        "--reconnect",
        type=int,
        default=3,
        metavar="N",
        help="live streams: times in a row a lost stream is opened again, 0.5 s, 1 s, 2 s... apart (default 3)",
    )
    g.add_argument(
        "--listen",
        action="store_true",
        help="with rtmp:// and tcp:// sources: listen on the URL's address for the publisher (ffmpeg -f flv "
        "rtmp://HOST:1935/live/cam, OBS) to connect, waiting up to 10 s, and again after it leaves (--reconnect)",
    )
    g.add_argument(
        "--codec",
        metavar="NAME",
        help="FFmpeg encoder of the output video, e.g. libx264, mpeg4, h264_nvenc (NVENC; default: "
        "libx264 for .mp4/.mkv/.mov where FFmpeg has it, else mpeg4)",
    )
    g.add_argument(
        "--encoder-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an FFmpeg option of the output video's encoder, repeatable, e.g. --encoder-option preset=veryfast "
        "(libx264's presets trade file size for speed; medium is its default) --encoder-option crf=23",
    )
    g.add_argument(
        "--decoder",
        choices=DECODERS,
        default="auto",
        help="video decoder: nvdec (GPU, PyNvVideoCodec), pyav (CPU), auto: nvdec where it loads",
    )
    g.add_argument(
        "--nvdec-decoders",
        type=int,
        default=1,
        metavar="N",
        help="NVDEC decoders at once, each on chunks of whole GOPs of the video, frames still in order (a GPU has "
        "several NVDEC engines; each decoder may hold 256 decoded frames ahead, in device memory)",
    )
    g.add_argument(
        "--decode-threads",
        type=int,
        metavar="N",
        help="threads of PyAV's CPU decoder (default 4; 0: FFmpeg chooses, a thread per core and one more)",
    )
    g.add_argument(
        "--preprocess",
        choices=("auto", "gpu", "cpu"),
        default="auto",
        help="where frames are letterboxed: auto: on the GPU wherever the input is a 3-channel image (NVDEC "
        "frames where they are, the model input never visiting the host; PyAV frames and images uploaded once, the "
        "CPU left decoding and encoding), else the CPU, the reason shown; gpu: the same, an error where it cannot; "
        "cpu: on the CPU (NVDEC frames come to host memory)",
    )
    g.add_argument("--batch", type=int, metavar="N", help="frames per engine call (default: the profile's max)")
    g.add_argument(
        "--max-wait-ms", type=float, default=5.0, metavar="MS", help="how long a batch waits to fill (default 5)"
    )
    g.add_argument(
        "--runners",
        type=int,
        default=2,
        metavar="N",
        help="runners (contexts and streams) with batches in flight (default 2)",
    )
    g.add_argument("--queue-size", type=int, default=8, metavar="N", help="frames between two stages (default 8)")
    g.add_argument(
        "--workers",
        type=int,
        default=2,
        metavar="N",
        help="threads decoding images (--images) and preprocessing (default 2)",
    )
    g.add_argument(
        "--resize",
        choices=("letterbox", "stretch"),
        default="letterbox",
        help="how pictures are fitted to the engine's input (default letterbox)",
    )
    g.add_argument("--no-live", dest="live", action="store_false", help="no live view on a terminal")


def wants_pipeline(args) -> bool:
    """Whether ``args`` ask for the pipeline (a source, or an option only the pipeline has)."""
    return any(getattr(args, name, None) for name in ("video", "images", "view", "out", "results"))


def run_pipeline(args, console) -> int:
    """Build the sources, sinks and processing from ``args``, run (several sources at once, each in a thread),
    render; 130 when interrupted (drained: Ctrl-C or SIGTERM); 1 when a live stream ended for good."""
    import signal
    import threading
    import time

    from trtkit.errors import TrtkitError

    if not (args.video or args.images or args.view):
        raise UsageError("--out and --results need a source: --video FILE, --view NAME=FILE or --images DIR")
    videos = _videos(args)
    _check_numbers(args, videos)
    processing = _processing(args)
    jobs: list = []
    try:
        for i, video in enumerate(videos or [None]):
            source = _source(args, video)
            jobs.append((source, []))
            jobs[-1][1].extend(_sinks(args, source, i))
    except BaseException:
        for source, sinks in jobs:
            source.close()
            for sink in sinks:
                sink.discard()
        raise
    reports: list = [None] * len(jobs)  # a report, or the exception a run raised
    drain = threading.Event()
    live = _live_view(console) if args.live and console.is_terminal and len(jobs) == 1 else None

    def work(i, source, sinks):
        try:
            reports[i] = _run_one(args, source, sinks, processing, live, drain)
        except BaseException as exc:  # noqa: BLE001 - raised again by the main thread
            reports[i] = exc
            drain.set()

    def stop(*_):
        raise KeyboardInterrupt

    threads = [threading.Thread(target=work, args=(i, *job), daemon=True) for i, job in enumerate(jobs)]
    previous = signal.signal(signal.SIGTERM, stop)  # SIGTERM drains as Ctrl-C does: the outputs close and play
    try:
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            try:
                time.sleep(0.05)  # not join(): an interrupted join can leave is_alive() wrong
            except KeyboardInterrupt:
                if drain.is_set():  # a second Ctrl-C: stop at once
                    raise
                drain.set()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if live:
            live.stop()
    for report in reports:
        if isinstance(report, BaseException):
            raise report
    for video, report in zip(videos or [None], reports):
        title = f"trtkit run {args.engine} ({video or ('views' if args.view else 'images')})"
        render_report(report, console, title=title)
    if args.json:
        from trtkit.cli.render import write_json

        figures = [r.to_json() for r in reports]
        write_json(args.json, figures[0] if len(figures) == 1 else {"sources": figures})
    ended = [r.source["ended"] for r in reports if r.source.get("ended")]
    if ended and not drain.is_set():
        raise TrtkitError("; ".join(ended))
    return 130 if any(r.interrupted for r in reports) else 0


def _run_one(args, source, sinks, processing, live, drain):
    from trtkit.pipeline.api import run_engine

    return run_engine(
        args.engine,
        source,
        sinks=sinks,
        processing=processing,
        batch=args.batch,
        max_wait_ms=args.max_wait_ms,
        runners=args.runners,
        queue_size=args.queue_size,
        pre_workers=args.workers,
        resize=args.resize,
        preprocess=args.preprocess,
        monitor=live.update if live else None,
        drain=drain,
        cuda_graph=args.cuda_graph,
        profile=args.profile_index,
        allow_mismatch=args.ignore_manifest,
    )


def _videos(args) -> list:
    """The ``--video`` sources, a ``.txt`` one read as a list of sources (one a line, ``#`` comments)."""
    from pathlib import Path

    from trtkit.errors import InputError

    videos: list = []
    for video in args.video or []:
        if not video.lower().endswith(".txt"):
            videos.append(video)
            continue
        try:
            lines = Path(video).read_text().splitlines()
        except OSError as exc:
            raise InputError(f"Cannot read the list of sources '{video}': {exc.strerror or exc}") from exc
        videos += [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    return videos


def _check_numbers(args, videos: list) -> None:
    from trtkit.pipeline.live import is_stream

    for option, given in (("--out", None if args.view else args.out), ("--results", args.results)):
        if given and len(given) != max(1, len(videos)):
            raise UsageError(f"{option} is given {len(given)} time(s) for {max(1, len(videos))} source(s): one each")
    if any(is_stream(v) for v in videos) and (args.decoder == "nvdec" or args.nvdec_decoders > 1):
        raise UsageError("live streams and cameras decode with PyAV: give them without --decoder nvdec")
    for option, value, low in (
        ("--reconnect", args.reconnect, 0),
        ("--batch", args.batch, 1),
        ("--runners", args.runners, 1),
        ("--queue-size", args.queue_size, 1),
        ("--workers", args.workers, 1),
        ("--nvdec-decoders", args.nvdec_decoders, 1),
        ("--decode-threads", args.decode_threads, 0),
    ):
        if value is not None and value < low:
            raise UsageError(f"{option} must be at least {low}, not {value}")
    if args.skeleton and args.post != "pose":
        raise UsageError("--skeleton names the lines between pose keypoints: give it with --post pose")
    for option, value in (("--conf", args.conf), ("--iou", args.iou), ("--min-confidence", args.min_confidence)):
        if not 0.0 <= value <= 1.0:
            raise UsageError(f"{option} must be between 0 and 1, not {value}")
    if args.max_wait_ms < 0:
        raise UsageError(f"--max-wait-ms must be >= 0, not {args.max_wait_ms}")
    if args.nvdec_decoders > 1 and (not args.video or args.decoder == "pyav"):
        raise UsageError(
            "--nvdec-decoders splits a video over NVDEC decoders: give it with --video, without --decoder pyav"
        )
    if args.decode_threads is not None and (not (args.video or args.view) or args.decoder == "nvdec"):
        raise UsageError(
            "--decode-threads sets PyAV's CPU decoder threads: give it with --video, without --decoder nvdec"
        )
    if (args.head or args.names) and args.post != "detection":
        raise UsageError("--head and --names choose how --post detection decodes and draws: give them with it")
    if args.listen and not args.video:
        raise UsageError("--listen waits for a stream's publisher: give it with --video rtmp://... or tcp://...")
    if args.encoder_option and not ((args.video or args.view) and args.out):
        raise UsageError("--encoder-option sets the output video's encoder: give it with --video and --out")
    if args.view and (args.post == "detection" or args.realtime):
        raise UsageError(
            "--view takes video files for pose models or raw outputs: give it without --post detection and --realtime"
        )
    views = _named(args.view or [], "--view")
    for view in _named(args.out or [], "--out") if args.view else ():
        if view not in views:
            raise UsageError(f"--out {view}=...: '{view}' is not a --view; the views: {', '.join(views)}")


def _named(specs: list, option: str) -> dict:
    """``NAME=VALUE`` specs (repeated ``option``) as a dict, in order."""
    from trtkit.pipeline.live import is_stream

    named: dict = {}
    for text in specs:
        name, sep, value = text.partition("=")
        if not sep or not name or not value or name in named or (option == "--view" and is_stream(value)):
            raise UsageError(f"{option} '{text}': give NAME=FILE, a video file, once for each name")
        named[name] = value
    return named


def _encoder_options(args) -> dict:
    """``--encoder-option KEY=VALUE`` (repeated) as a dict."""
    options = {}
    for text in args.encoder_option:
        key, sep, value = text.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UsageError(f"--encoder-option '{text}': give KEY=VALUE, e.g. preset=veryfast")
        options[key.strip()] = value.strip()
    return options


def _processing(args):
    from calibrators.preprocess import parse_normalize
    from trtkit.pipeline.api import Processing

    norm = parse_normalize(args.normalize) or None
    if args.post == "none":
        return Processing(normalize=norm)
    from trtkit.detection.names import check_task, metadata_kpt_shape, metadata_names, model_metadata

    metadata = model_metadata(args.engine)
    task = {"detection": "detect", "pose": "pose"}[args.post]
    check_task(metadata, task, {"detect": "--post detection", "pose": "--post pose"}, f"'{args.engine}'")
    if args.post == "detection":
        from trtkit.detection import read_names
        from trtkit.pipeline.detect import detection_processing

        names = read_names(args.names) if args.names else metadata_names(metadata)
        return detection_processing(args.conf, args.iou, class_names=names, head=args.head, normalize=norm)
    from trtkit.pipeline.pose import pose_processing

    options = dict(min_confidence=args.min_confidence, conf_threshold=args.conf, iou_threshold=args.iou)
    return pose_processing(
        args.skeleton, resize=args.resize, normalize=norm, kpt_shape=metadata_kpt_shape(metadata), **options
    )


def _source(args, video):
    from trtkit.pipeline.live import LiveSource, is_stream
    from trtkit.pipeline.sources import ImageFolderSource, VideoSource

    if args.view:
        from trtkit.pipeline.views import MultiViewSource

        opened: dict = {}
        try:
            for view, path in _named(args.view, "--view").items():
                opened[view] = VideoSource(path, decoder=args.decoder, decode_threads=args.decode_threads)
        except BaseException:
            for source in opened.values():
                source.close()
            raise
        return MultiViewSource(opened)
    if video and (is_stream(video) or args.realtime or args.listen):
        options = dict(drop=args.drop, reconnect=args.reconnect, threads=args.decode_threads)
        options["options"] = {"listen": "1"} if args.listen else None
        return LiveSource(video, buffer=args.queue_size, **options)
    if video:
        device = args.decoder != "pyav" and args.preprocess != "cpu"
        return VideoSource(
            video,
            decoder=args.decoder,
            device_memory=device,
            nvdec_decoders=args.nvdec_decoders,
            decode_threads=args.decode_threads,
        )
    return ImageFolderSource(args.images, workers=args.workers)


def _sinks(args, source, i: int) -> list:
    from trtkit.pipeline.sinks import ImageFolderSink, JsonLinesSink, VideoSink
    from trtkit.pipeline.views import ViewSink

    sinks: list = []
    try:
        outs = _named(args.out, "--out") if args.view and args.out else {None: args.out[i]} if args.out else {}
        for view, path in outs.items():
            if not (args.video or args.view):
                sinks.append(ImageFolderSink(path))
                continue
            sink = VideoSink(path, fps=source.fps, codec=args.codec, options=_encoder_options(args))
            sinks.append(ViewSink(view, sink) if view else sink)
        if args.results:
            sinks.append(JsonLinesSink(args.results[i]))
    except BaseException:
        for sink in sinks:
            sink.discard()
        raise
    return sinks


class _LiveView:
    def __init__(self, console):
        from rich.live import Live

        self._live = Live(console=console, refresh_per_second=4, transient=True)
        self._live.start()

    def update(self, report) -> None:
        self._live.update(report_table(report, title=f"{report.frames_out} frames, {report.fps:.1f} FPS"))

    def stop(self) -> None:
        self._live.stop()


def _live_view(console):
    return _LiveView(console)


def report_table(report, title: str):
    from trtkit.cli.render import table

    cores = (report.cpu or {}).get("stages", {})  # CPU of each stage's threads and its libraries' (an encoder's)
    rows = [
        (
            name,
            s.workers,
            s.frames,
            s.avg_ms,
            s.min_ms,
            s.max_ms,
            s.p99_ms,
            round(s.busy_pct, 1),
            None if s.fps_alone is None else round(s.fps_alone, 1),
            _two_places(cores.get(name, {}).get("cores")),
        )
        for name, s in report.stages.items()
    ]
    headers = ["stage", "threads", "frames", "avg ms", "min ms", "max ms", "p99 ms", "busy %", "FPS alone", "cores"]
    return table(title, headers, rows)


def _two_places(value):
    return None if value is None else round(value, 2)


def render_report(report, console, title: str) -> None:
    from trtkit.cli.render import table

    console.print(report_table(report, title))
    queues = [(name, q["capacity"], q["max_depth"], q["mean_depth"]) for name, q in report.queues.items()]
    console.print(table("queues", ["queue", "capacity", "max depth", "mean depth"], queues))
    slowest = report.slowest_stage()
    unit = ("images", "images/s") if report.source.get("kind") == "images" else ("frames", "FPS")
    console.print(
        f"{report.frames_in} {unit[0]} in, {report.frames_out} out in {report.elapsed_s:.2f} s: "
        f"{report.fps:.1f} {unit[1]}"
        + (f"; slowest stage: {slowest.name} ({slowest.fps_alone:.1f} {unit[1]} alone)" if slowest else "")
    )
    if report.steady_fps is not None:
        console.print(f"first {unit[0]} out after {report.first_out_s:.2f} s, then {report.steady_fps:.1f} {unit[1]}")
    gpu = report.gpu or {}
    if gpu.get("batches"):
        console.print(
            f"GPU busy {gpu['busy_pct']}% of the run ({gpu['batches']} batches, "
            f"{gpu['avg_ms_per_batch']} ms each); idle between batches {gpu['idle_between_batches_pct']}%"
        )
    if report.latency:
        drop = report.source.get("drop")
        console.print(
            f"frame latency (arrival to output): p50 {report.latency['p50_ms']:.1f} ms, p99 "
            f"{report.latency['p99_ms']:.1f} ms"
            + (f"; {report.dropped} frame(s) dropped (--drop {drop}), {report.reconnects} reconnect(s)" if drop else "")
        )
    decoder = report.source.get("decoder")
    if decoder:
        console.print(f"decoder: {decoder} ({report.source.get('decoder_reason')})")
    where = report.source.get("preprocess")
    if where:
        console.print(f"preprocessing: on the {where['on'].upper()} ({where['reason']})")
    if report.skipped:
        listed = "; ".join(f"{s.position}: {s.reason}" for s in report.skipped[:10])
        console.print(f"skipped {len(report.skipped)} undecodable frame(s): {listed}")
    if report.interrupted:
        console.print("interrupted: the frames read before Ctrl-C were finished and the output closed")
