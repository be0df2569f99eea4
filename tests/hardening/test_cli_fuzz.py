"""Beyond issue 14's list: random option combinations and damaged files for every subcommand (seeded, time-boxed).

Every run must end in exit 0, 1 or 2, never with a traceback, and an error (exit 2, or exit 1 with an ``error:``
line) must leave every file as it was: nothing created or changed. Whatever the exit, the files a run reads (its
model or engine, and a model's external data file) are never changed: outputs include those files, names over the
filesystem's limit and a folder that cannot be written. (Exit 1 is also a verdict — parity's FAIL, doctor
finding a problem — whose report is written.) Runs on the fake TensorRT and CUDA backends, so builds, runs and
benchmarks succeed
where the arguments are right.
"""

import hashlib
import os
import random
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests import models
from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture
from trtkit.cli import main as cli_main

SEED = 14
BUDGET_S = 15.0
SHAPES = "x:1x3x8x8,2x3x8x8,4x3x8x8"
DATA = {"ext.onnx": "ext.weights", "trunc.onnx": "trunc.weights"}  # models with external data, and their data file
LONG = "L" * 260  # a name over NAME_MAX (255)


def _work(root: Path, capsys) -> dict:
    good = models.tiny_conv().SerializeToString()
    files = {"good.onnx": good, "truncated.onnx": good[: len(good) // 2], "empty.onnx": b"",
             "npy.onnx": b"\x93NUMPY garbage", "garbage.cache": b"\x00\x01\xff garbage", "junk.npz": b"PK\x03\x04 no"}
    for name, data in files.items():
        (root / name).write_bytes(data)
    for name, data in DATA.items():
        onnx.save(models.tiny_conv(), str(root / name), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=data, size_threshold=0)
    (root / "trunc.weights").write_bytes((root / "trunc.weights").read_bytes()[:64])
    (root / "ro").mkdir()
    (root / "ro").chmod(0o500)
    (root / "folder.onnx").mkdir()
    (root / "calib").mkdir()
    np.save(root / "calib" / "a.npy", np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32))
    np.save(root / "x.npy", np.zeros((2, 3, 8, 8), np.float32))
    np.save(root / "wrong.npy", np.zeros((5, 5), np.int64))
    assert cli_main.main(["build", str(root / "good.onnx"), "--shapes", SHAPES, "--no-isolate", "-o",
                          str(root / "good.engine")]) == 0
    engine = (root / "good.engine").read_bytes()
    (root / "truncated.engine").write_bytes(engine[: len(engine) // 2])
    (root / "empty.engine").write_bytes(b"")
    (root / "out").mkdir()
    capsys.readouterr()
    return {"onnx": ["good.onnx", "truncated.onnx", "empty.onnx", "npy.onnx", "folder.onnx", "missing.onnx",
                     "good.engine", "ext.onnx", "ext.onnx", "trunc.onnx"],
            "engine": ["good.engine", "truncated.engine", "empty.engine", "good.onnx", "folder.onnx", "missing.engine"]}


def _output(rng, root: Path) -> str:
    return rng.choice([f"out/new{rng.randrange(1000)}.bin", "good.onnx", "good.engine", "folder.onnx", "",
                       "missing/x.bin", "x.npy", "calib", "ext.weights", "ext.weights", "trunc.weights", "ro/x.bin",
                       LONG, f"out/{LONG}/x.bin", "out/" + "e" * 245 + ".engine"])


def _options(rng, command: str, root: Path) -> list:
    common = {
        "build": [["--shapes", SHAPES], ["--shapes", "x:4x3x8x8,1x3x8x8,2x3x8x8"], ["--shapes", "y:1x3x8x8"],
                  ["--shapes", "garbage"], ["--fp16"], ["--int8"], ["--int8", "--calib", "calib"],
                  ["--int8", "--calib", "missing"], ["--calib", "calib"], ["--calib-cache", "garbage.cache"],
                  ["--int8-mode", "qdq"], ["--workspace", rng.choice(["4G", "-4G", "0", "x"])],
                  ["--opt-level", rng.choice(["3", "9", "-1"])], ["--timing-cache", "garbage.cache"],
                  ["--timing-cache", "folder.onnx"], ["--timing-cache-reset"], ["--tactic-sources", ","],
                  ["--calib-batch", rng.choice(["0", "2", "-3"])], ["--no-check"], ["--save-sanitized", None],
                  ["--json", None], ["-o", None], ["--no-isolate"], ["--save-qdq-onnx", None],
                  ["--batch", rng.choice(["1,2,4", "4,1", "0", "x"])], ["--add-nms"],
                  ["--nms-score", rng.choice(["0.3", "2"])], ["--nms-iou", "0"]],
        "run": [["--input", rng.choice(["x=x.npy", "x=wrong.npy", "x=good.onnx", "junk.npz", "x.npy", "x=calib"])],
                ["--iterations", rng.choice(["1", "0", "-5", "2"])], ["--shapes", "x:2x3x8x8"],
                ["--shapes", "q:1"], ["--profile-index", rng.choice(["0", "3", "-1"])], ["--save-outputs", None],
                ["--json", None], ["--no-cuda-graph"], ["--ignore-manifest"], ["-v"]],
        "bench": [["--streams", rng.choice(["1", "0", "2"])], ["--duration-s", rng.choice(["0", "-1"])],
                  ["--warmup-ms", "-1"], ["--profile-index", "5"], ["--json", None], ["--no-cuda-graph"],
                  ["--shapes", SHAPES], ["--fp16"], ["--no-e2e"]],
        "parity": [["--trials", rng.choice(["0", "1", "2"])], ["--value-range", rng.choice(["5,1", "0,1", "x"])],
                   ["--shapes", rng.choice(["x:2x3x8x8", "x:9x9", "nope"])], ["--save-arrays", None],
                   ["--json", None], ["--precision", "fp16"], ["--metric-threshold", rng.choice(["y:0.1", "q:1", "z"])],
                   ["--inputs", rng.choice(["x.npy", "junk.npz", "calib", "missing"])], ["--profile-index", "2"]],
        "inspect": [["--check"], ["--layers"], ["--json", None], ["--ignore-manifest"]],
        "doctor": [["--json", None]],
        # (no --output-dir: it names a work folder the demo fills as it goes)
        "demo": [["--batch", rng.choice(["0", "8", "-1"])], ["--iterations", rng.choice(["0", "2"])],
                 ["--json", None], ["--output-dir", rng.choice(["", "x.npy", "ro", "ro/new", LONG])]],
        "export": [["--name", rng.choice(["m", "", "a/b"])], ["--instances", rng.choice(["0", "1", "-2"])],
                   ["--gpus", rng.choice(["0", "x", ""])], ["--max-queue-delay-us", "-1"], ["--force"],
                   ["--triton-version", rng.choice(["24.01", "nope"])], ["--json", None]],
        "sanitize": [["-o", None], ["--no-fold-constants"], ["--tensorrt", rng.choice(["8.6", "installed"])],
                     ["--json", None]],
        # (no --calib: INT8 calibration data is read after the other precisions are built and cached)
        "compare": [["--precisions", rng.choice(["fp32", "fp32,fp16", "fp64", "fp32,int8", "bf16"])],
                    ["--batches", rng.choice(["1,4", "0", "x", "8"])], ["--baseline", rng.choice(["fp16", "int8"])],
                    ["--static-per-batch"], ["--eval", rng.choice(["classification", "detection"])],
                    ["--images", rng.choice(["calib", "missing"])], ["--coco", "junk.npz"],
                    ["--json", None], ["--markdown", None], ["--plot", None], ["--int8-mode", "qdq"]],
        "eval": [["--coco", rng.choice(["junk.npz", "missing.json"])], ["--frames", rng.choice(["0", "9"])],
                 ["--min-confidence", "x"], ["--peak-cell"], ["--video", rng.choice(["missing.mp4", "good.onnx"])],
                 ["--reference", rng.choice(["good.onnx", "empty.onnx"])], ["--batch", rng.choice(["0", "2"])],
                 ["--min-map", "x"], ["--json", None], ["--max-px", "-1"]],
        # serve is only given what must fail (a valid engine would start a server that runs until stopped)
        "serve": [["--instances", rng.choice(["0", "-1"])], ["--max-batch", "0"], ["--gpus", "x"],
                  ["--http-port", rng.choice(["-1", "99999"])], ["--exit-timeout-s", "-1"], ["--json", None],
                  ["--log-file", None]],
    }[command]
    chosen = []
    for option in rng.sample(common, k=rng.randint(0, min(4, len(common)))):
        chosen += [o if o is not None else _output(rng, root) for o in option]
    return chosen


def _argv(rng, command: str, files: dict, root: Path) -> tuple:
    """``(argv, the files the run reads)``."""
    positional = {"build": [rng.choice(files["onnx"])], "run": [rng.choice(files["engine"])],
                  "bench": [rng.choice(files["engine"] + ["good.onnx"])], "inspect": [rng.choice(files["onnx"])],
                  "parity": [rng.choice(files["onnx"]), rng.choice(files["engine"])], "doctor": [], "demo": [],
                  "export": ["triton", rng.choice(files["engine"]), "--repo", _output(rng, root)],
                  "serve": [rng.choice(files["engine"][1:])], "sanitize": [rng.choice(files["onnx"])],
                  "eval": [rng.choice(["detection", "classification", "keypoints"]), rng.choice(files["engine"]),
                           "--images", rng.choice(["calib", "folder.onnx", "missing", "x.npy"])],
                  "compare": [rng.choice(files["onnx"])]}
    succeed = rng.random() < 0.2  # now and then a run that should succeed, so the invariant is seen from both sides
    if succeed:
        positional = {"build": ["good.onnx", "--shapes", SHAPES, "-o", f"out/ok{rng.randrange(1000)}.engine"],
                      "run": ["good.engine"], "bench": ["good.engine"], "inspect": ["good.onnx"],
                      "parity": ["good.onnx", "good.engine"], "doctor": [], "demo": ["--batch", "2"],
                      "export": ["triton", "good.engine", "--repo", f"out/repo{rng.randrange(1000)}"],
                      "serve": ["empty.engine"], "sanitize": ["good.onnx", "-o", f"out/s{rng.randrange(1000)}.onnx"],
                      "eval": ["classification", "good.engine", "--images", "calib"],
                      "compare": ["good.onnx", "--precisions", "fp32,fp16", "--batches", "1,2"]}
    argv = [command, *positional[command], *([] if succeed else _options(rng, command, root))]
    reads = {a for a in positional[command] if a in files["onnx"] + files["engine"] and (root / a).is_file()}
    reads |= {DATA[a] for a in reads if a in DATA}
    if command == "bench":
        argv += ["--iterations", "2", "--warmup-ms", "0", "--cache-dir", "out/cache"]
    if command == "compare":
        argv += ["--iterations", "1", "--warmup-ms", "0", "--rounds", "1", "--no-isolate", "--cache-dir", "out/cache"]
    if command == "build" and "--no-isolate" not in argv:
        argv.append("--no-isolate")
    return [a if a.startswith("-") or a in cli_main.COMMANDS or not a else str(root / a) for a in argv], sorted(reads)


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.is_dir() or hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
            for p in sorted(root.rglob("*"))}


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_cli_fuzz(tmp_path, capsys, fake_gpu, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    files = _work(tmp_path, capsys)
    monkeypatch.setenv("TRTKIT_CACHE_DIR", str(tmp_path / "out" / "cache"))  # the timing caches too
    if os.geteuid() == 0:  # root may write anyway: make the folder read-only as far as the checks can tell
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, m: False if Path(p) == tmp_path / "ro" else real_access(p, m))
    rng = random.Random(SEED)
    commands = sorted(cli_main.COMMANDS)
    started, runs, codes = time.monotonic(), 0, {}
    while time.monotonic() - started < BUDGET_S or runs < len(commands):
        command = commands[runs % len(commands)]
        argv, reads = _argv(rng, command, files, tmp_path)
        before = _snapshot(tmp_path)
        try:
            code = cli_main.main(argv)
        except BaseException as exc:  # noqa: BLE001 - anything escaping main is a traceback for the user
            pytest.fail(f"trtkit {' '.join(argv)} raised {type(exc).__name__}: {exc}")
        out, err = capsys.readouterr()
        runs += 1
        codes[code] = codes.get(code, 0) + 1
        assert code in (0, 1, 2), (argv, code, err)
        assert "Traceback" not in err, (argv, err)
        if code != 0:  # an error says why on stderr; a verdict (parity's FAIL) is the report itself
            assert err.strip() or (code == 1 and "FAIL" in out), (argv, "failed without saying why")
        after = _snapshot(tmp_path)
        assert {r: after.get(r) for r in reads} == {r: before[r] for r in reads}, (argv, err, "an input changed")
        if code == 2 or "error:" in err:  # an error (not a verdict such as parity's FAIL): nothing written
            assert after == before, (argv, err, set(after.items()) ^ set(before.items()))
    print(f"cli fuzz: {runs} runs in {time.monotonic() - started:.1f} s, exit codes {dict(sorted(codes.items()))}")
    assert runs >= 50 and {0, 1, 2} <= set(codes), codes  # the budget reached successes and both kinds of error
