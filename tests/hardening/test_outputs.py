"""Issue 14, items 1-4: no command or library writer destroys an input, leaves half its files, or overwrites a timing
cache it could not load; written files get the umask's mode."""

import json
import os
import stat
from pathlib import Path

import onnx
import pytest

from tests import models
from tests.hardening import run_cli
from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture
from trtkit import _atomic
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.builder.prepare import prepare
from trtkit.builder.profiles import parse_shapes
from trtkit.cli.options import flag_message
from trtkit.errors import BuildError, UsageError, WriteError

DATA = Path(__file__).resolve().parents[1] / "data"
MODEL = DATA / "digits_cnn.onnx"
SHAPES = "images:1x1x8x8,32x1x8x8,64x1x8x8"


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(MODEL.read_bytes())
    return path


def _snapshot(folder: Path) -> dict:
    return {p.name: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for p in sorted(folder.iterdir()) if p.is_file()}


def _build(model, capsys, *extra):
    return run_cli(["build", str(model), "--shapes", SHAPES, "--no-isolate", *extra], capsys)


@pytest.mark.parametrize("how", ["same path", "symlink", "hard link", "dotted path"])
def test_build_refuses_an_output_that_is_the_model(model, tmp_path, capsys, fake_gpu, how):  # noqa: F811
    target = {"same path": model, "dotted path": tmp_path / "." / "m.onnx"}.get(how, tmp_path / "link.engine")
    if how == "symlink":
        target.symlink_to(model)
    elif how == "hard link":
        os.link(model, target)
    before = _snapshot(tmp_path)
    code, _, err = _build(model, capsys, "-o", str(target))
    assert code == 2 and "--output" in err and "same file as model" in err and err.count("\n") == 1, err
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("flag", ["--timing-cache", "--json", "--save-sanitized", "--calib-cache"])
def test_every_build_output_is_checked_against_the_model(model, tmp_path, capsys, fake_gpu, flag):  # noqa: F811
    before = _snapshot(tmp_path)
    extra = ["--int8", "--int8-mode", "qdq"] if flag == "--calib-cache" else []
    code, _, err = _build(model, capsys, "-o", str(tmp_path / "m.engine"), flag, str(model), *extra)
    assert code == 2 and flag in err and "same file" in err, err
    assert _snapshot(tmp_path) == before


def test_two_outputs_on_one_file_are_refused(model, tmp_path, capsys, fake_gpu):  # noqa: F811
    code, _, err = _build(model, capsys, "-o", str(tmp_path / "m.engine"), "--json", str(tmp_path / "m.engine"))
    assert code == 2 and "--json" in err and "same file as output" in err


def test_other_commands_refuse_to_overwrite_their_inputs(model, tmp_path, capsys, fake_gpu):  # noqa: F811
    engine = tmp_path / "m.engine"
    assert _build(model, capsys, "-o", str(engine))[0] == 0
    before = _snapshot(tmp_path)
    for argv in (["inspect", str(model), "--json", str(model)],
                 ["run", str(engine), "--save-outputs", str(engine)],
                 ["run", str(engine), "--json", str(engine)],
                 ["parity", str(model), str(engine), "--save-arrays", str(model)],
                 ["bench", str(engine), "--json", str(engine), "--iterations", "1"]):
        code, _, err = run_cli(argv, capsys)
        assert code == 2 and "same file" in err and "Traceback" not in err, (argv, err)
    assert _snapshot(tmp_path) == before


def test_library_build_refuses_output_equal_to_model(model, fake_trt):
    with pytest.raises(UsageError, match="same file as model") as info:
        build(str(model), BuildConfig(), output=model, trt=fake_trt)
    assert info.value.field == "output"
    with pytest.raises(UsageError, match="same file as model") as info:
        build(str(model), BuildConfig(timing_cache=str(model)), output=None, trt=fake_trt)
    assert info.value.field == "timing_cache"
    assert model.read_bytes() == MODEL.read_bytes()


def test_written_files_get_the_umask_mode_and_replaced_files_keep_theirs(tmp_path):
    old = os.umask(0o027)
    try:
        assert _atomic.current_umask() == 0o027
        _atomic.write_bytes_atomic(tmp_path / "new.bin", b"x")
        assert stat.S_IMODE((tmp_path / "new.bin").stat().st_mode) == 0o640
    finally:
        os.umask(old)
    kept = tmp_path / "kept.bin"
    kept.write_bytes(b"old")
    os.chmod(kept, 0o604)
    _atomic.write_text_atomic(kept, "new")
    assert kept.read_text() == "new" and stat.S_IMODE(kept.stat().st_mode) == 0o604


def test_build_outputs_get_the_umask_mode(model, tmp_path, capsys, fake_gpu):  # noqa: F811
    old = os.umask(0o022)
    try:
        code, _, err = _build(model, capsys, "-o", str(tmp_path / "m.engine"), "--timing-cache",
                              str(tmp_path / "t.cache"), "--json", str(tmp_path / "m.json"))
    finally:
        os.umask(old)
    assert code == 0, err
    for name in ("m.engine", "m.engine.manifest.json", "t.cache", "m.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


def test_write_files_atomic_is_all_or_nothing(tmp_path):
    (tmp_path / "a").write_bytes(b"old a")
    with pytest.raises(WriteError, match="does not exist"):
        _atomic.write_files_atomic({tmp_path / "a": b"new a", tmp_path / "missing" / "b": b"b"})
    assert (tmp_path / "a").read_bytes() == b"old a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "missing"] if (tmp_path / "missing").exists() else ["a"]


def test_unwritable_outputs_fail_before_the_build(model, tmp_path, capsys, fake_gpu, monkeypatch):  # noqa: F811
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.geteuid() == 0:  # root may write anyway: make the folder read-only as far as the check can tell
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == locked else real_access(p, mode))
    try:
        for flag in ("--timing-cache", "--json"):
            code, _, err = _build(model, capsys, "-o", str(tmp_path / "m.engine"), flag, str(locked / "x"))
            assert code == 1 and "not writable" in err and flag in err, err
            assert not (tmp_path / "m.engine").exists()
    finally:
        locked.chmod(0o700)


def test_an_output_folder_that_is_missing_fails_before_the_build(model, tmp_path, capsys, fake_gpu):  # noqa: F811
    for flag in ("--timing-cache", "--json", "-o"):
        extra = [] if flag == "-o" else ["-o", str(tmp_path / "m.engine")]
        code, _, err = _build(model, capsys, *extra, flag, str(tmp_path / "nope" / "x"))
        assert code == 1 and "does not exist" in err, err
        assert not (tmp_path / "m.engine").exists()


def test_an_empty_output_path_is_a_usage_error(model, tmp_path, capsys, fake_gpu):  # noqa: F811
    code, _, err = _build(model, capsys, "-o", "")
    assert code == 2 and "--output" in err and "empty" in err
    assert not (tmp_path / "m.engine").exists()


def test_a_timing_cache_that_does_not_load_is_an_error_and_kept(model, tmp_path, capsys, fake_gpu):  # noqa: F811
    cache = tmp_path / "t.cache"
    cache.write_bytes(b"\x00garbage\xff")
    code, _, err = _build(model, capsys, "-o", str(tmp_path / "m.engine"), "--timing-cache", str(cache))
    assert code == 1 and "does not load" in err and "--timing-cache-reset" in err, err
    assert cache.read_bytes() == b"\x00garbage\xff" and not (tmp_path / "m.engine").exists()
    code, _, err = _build(model, capsys, "-o", str(tmp_path / "m.engine"), "--timing-cache", str(cache),
                          "--timing-cache-reset")
    assert code == 0 and "replacing it with a new one" in err, err
    assert len(json.loads(cache.read_bytes())["entries"]) >= 1


def test_library_timing_cache_errors_name_the_field(model, tmp_path, fake_trt):
    cache = tmp_path / "t.cache"
    cache.write_bytes(b"garbage")
    with pytest.raises(BuildError, match="does not load") as info:
        build(str(model), BuildConfig(timing_cache=str(cache), profiles=[parse_shapes(SHAPES)]), trt=fake_trt)
    assert info.value.field == "timing_cache_reset" and "--" not in str(info.value)
    assert "or pass --timing-cache-reset to replace it" in flag_message(info.value)


def test_a_timing_cache_that_is_a_folder_is_a_clear_error(model, tmp_path, capsys, fake_gpu):  # noqa: F811
    folder = tmp_path / "cachedir"
    folder.mkdir()
    code, _, err = _build(model, capsys, "-o", str(tmp_path / "m.engine"), "--timing-cache", str(folder))
    assert code == 2 and "--timing-cache" in err and "is a folder" in err and "Traceback" not in err, err


# --- a model's external data files are inputs too; names the filesystem refuses; folders that cannot be written ---


def _external_model(folder: Path, data: str = "ext.weights") -> Path:
    """tiny_conv with its weights in ``data`` beside it (as exporters write models over 2 GB)."""
    path = folder / "ext.onnx"
    onnx.save(models.tiny_conv(), str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data,
              size_threshold=0)
    return path


EXT_SHAPES = "x:1x3x8x8,2x3x8x8,4x3x8x8"


@pytest.mark.parametrize("argv", [
    ["sanitize", "ext.onnx", "-o", "ext.weights"],
    ["sanitize", "ext.onnx", "-o", "out.onnx", "--json", "link"],
    ["build", "ext.onnx", "--shapes", EXT_SHAPES, "-o", "ext.weights"],
    ["build", "ext.onnx", "--shapes", EXT_SHAPES, "-o", "hard"],
    ["build", "ext.onnx", "--shapes", EXT_SHAPES, "-o", "m.engine", "--json", "link"],
    ["build", "ext.onnx", "--shapes", EXT_SHAPES, "-o", "m.engine", "--save-sanitized", "ext.weights"],
    ["build", "ext.onnx", "--shapes", EXT_SHAPES, "-o", "m.engine", "--timing-cache", "./ext.weights"],
    ["inspect", "ext.onnx", "--json", "ext.weights"],
])
def test_no_output_may_be_a_file_the_model_reads(tmp_path, capsys, fake_gpu, monkeypatch, argv):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    _external_model(tmp_path)
    (tmp_path / "link").symlink_to("ext.weights")
    os.link(tmp_path / "ext.weights", tmp_path / "hard")
    before = _snapshot(tmp_path)
    code, _, err = run_cli([*argv, *(["--no-isolate"] if argv[0] == "build" else [])], capsys)
    assert code == 2 and "is the same file as model's external data" in err and err.count("\n") == 1, err
    assert _snapshot(tmp_path) == before


def test_a_saved_models_weights_file_is_checked_too(tmp_path, capsys, fake_gpu, monkeypatch):  # noqa: F811
    """`-o s.onnx` writes the weights of a model with external data to s.onnx.data: here, the model's own."""
    monkeypatch.chdir(tmp_path)
    _external_model(tmp_path, data="s.onnx.data")
    before = _snapshot(tmp_path)
    for argv in (["sanitize", "ext.onnx", "-o", "s.onnx"],
                 ["build", "ext.onnx", "--shapes", EXT_SHAPES, "--no-isolate", "--save-sanitized", "s.onnx"]):
        code, _, err = run_cli(argv, capsys)
        assert code == 2 and "'s.onnx.data' is the same file as model's external data" in err, err
    assert _snapshot(tmp_path) == before
    with pytest.raises(UsageError, match="same file as model's external data") as info:
        prepare(tmp_path / "ext.onnx").save(tmp_path / "s.onnx")
    assert info.value.field == "path"
    with pytest.raises(UsageError, match="same file as model's external data") as info:
        build(str(tmp_path / "ext.onnx"), BuildConfig(profiles=[parse_shapes(EXT_SHAPES)]),
              output=tmp_path / "s.onnx.data", trt=fake_gpu[0])
    assert info.value.field == "output"
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_a_saved_models_weights_get_the_umask_mode_and_are_replaced_whole(tmp_path, capsys, umask):
    model = _external_model(tmp_path)
    old = os.umask(umask)
    try:
        for _ in range(2):  # the second save replaces the first's files (onnx itself would append to the weights)
            code, _, err = run_cli(["sanitize", str(model), "-o", str(tmp_path / "s.onnx")], capsys)
            assert code == 0, err
    finally:
        os.umask(old)
    for name in ("s.onnx", "s.onnx.data"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name
    assert (tmp_path / "s.onnx.data").stat().st_size == (tmp_path / "ext.weights").stat().st_size
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind
    onnx.checker.check_model(onnx.load(str(tmp_path / "s.onnx")))


def test_a_truncated_external_data_file_is_one_line_naming_tensor_and_file(tmp_path, capsys):
    model = _external_model(tmp_path)
    data = tmp_path / "ext.weights"
    data.write_bytes(data.read_bytes()[:100])
    before = _snapshot(tmp_path)
    for argv in (["sanitize", str(model), "-o", str(tmp_path / "s.onnx")],
                 ["build", str(model), "--shapes", EXT_SHAPES, "--no-isolate"]):
        code, _, err = run_cli(argv, capsys)
        assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
        assert "tensor 'w'" in err and "'ext.weights'" in err and "truncated" in err, err
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("flags", [["-o", "e" * 240 + ".engine"], ["-o", "m.engine", "--json", "j" * 256],
                                   ["-o", "m.engine", "--timing-cache", "d" * 300 + "/t.cache"]])
def test_a_name_over_the_filesystems_limit_is_one_line_before_the_build(tmp_path, capsys, fake_gpu,  # noqa: F811
                                                                         monkeypatch, flags):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.onnx").write_bytes(MODEL.read_bytes())
    code, _, err = _build(tmp_path / "m.onnx", capsys, *flags)
    assert code == 2 and "limit of 255 bytes per name" in err and err.count("\n") == 1, err
    assert ("manifest" in err) == flags[1].startswith("e")  # the derived <engine>.manifest.json is the long one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_an_output_folder_that_cannot_be_written_is_one_line(tmp_path, capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == locked else real_access(p, mode))
    try:
        for folder in (locked, locked / "new"):
            code, _, err = run_cli(["demo", "--output-dir", str(folder)], capsys)
            assert code == 1 and "--output-dir" in err and "not writable" in err and err.count("\n") == 1, err
        code, _, err = run_cli(["demo", "--output-dir", str(tmp_path / ("x" * 300))], capsys)
        assert code == 2 and "limit of 255 bytes per name" in err, err
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


def test_streamed_outputs_get_the_umask_mode_too(tmp_path):
    """A file written as it goes (JSON lines of a pipeline) is renamed into place with open()'s mode, not mkstemp's."""
    from trtkit.pipeline.sinks import JsonLinesSink

    old = os.umask(0o022)
    try:
        sink = JsonLinesSink(tmp_path / "r.jsonl")
        sink.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.jsonl").stat().st_mode) == 0o644
