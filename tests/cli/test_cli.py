import io
import json

import pytest

from tests import models
from trtkit.cli import main as cli_main
from trtkit.cli.render import make_console


def run_cli(argv, capsys):
    code = cli_main.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("command", sorted(cli_main.COMMANDS))
def test_every_subcommand_help(command, capsys):
    code, out, _ = run_cli([command, "--help"], capsys)
    assert code == 0
    assert f"trtkit {command}" in out


def test_top_level_help_and_version(capsys):
    assert run_cli(["--help"], capsys)[0] == 0
    code, out, _ = run_cli(["--version"], capsys)
    assert code == 0 and "trtkit" in out


def test_usage_error_exits_2(capsys):
    code, _, err = run_cli(["build"], capsys)
    assert code == 2 and "model" in err
    code, _, err = run_cli(["frobnicate"], capsys)
    assert code == 2


def test_bad_shapes_is_one_line_exit_2(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(models.tiny_conv().SerializeToString())
    code, _, err = run_cli(["build", str(model), "--shapes", "x:4x3x8x8,1x3x8x8,2x3x8x8", "--no-isolate"], capsys)
    assert code == 2 and err.startswith("error: --shapes: ")
    assert err.count("\n") == 1 and "min <= opt <= max" in err and "Traceback" not in err
    assert not (tmp_path / "m.engine").exists()


def test_not_onnx_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_text("hello")
    code, _, err = run_cli(["inspect", str(bad)], capsys)
    assert code == 1 and "not a valid ONNX model" in err and err.count("\n") == 1


def test_inspect_onnx_json(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(models.tiny_conv().SerializeToString())
    code, out, _ = run_cli(["inspect", str(model), "--json", "-"], capsys)
    assert code == 0
    data = json.loads(out[out.index("{"):])
    assert data["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["N", 3, 8, 8]}]
    assert data["ops"] == {"Conv": 1, "Relu": 1, "GlobalAveragePool": 1}


def _without_tensorrt():
    pytest.importorskip("onnx")
    try:
        import tensorrt  # noqa: F401
        pytest.skip("TensorRT is installed here")
    except ImportError:
        pass


def test_demo_without_tensorrt_runs_the_cpu_part_and_says_what_it_skipped(capsys, tmp_path):
    _without_tensorrt()
    code, out, err = run_cli(["demo", "--json", str(tmp_path / "demo.json"), "--output-dir", str(tmp_path)], capsys)
    assert code == 0, err
    assert "trtkit demo (CPU only)" in out and "Skipped: building and running TensorRT engines" in out
    data = json.loads((tmp_path / "demo.json").read_text())
    assert data["cpu_only"] is True and data["skipped"].startswith("TensorRT, which is not installed")
    fp16 = next(r for r in data["rows"] if r["step"].startswith("fp16"))
    assert 0 < fp16["rel_err"] <= 1e-2 and fp16["verdict"] == "PASS"  # measured against the FP32 model
    assert "layer(s) quantized" in data["rows"][-1]["what"]
    assert (tmp_path / "sample_cnn.fp16.onnx").exists()


def test_demo_require_gpu_says_what_is_missing(capsys):
    _without_tensorrt()
    code, out, err = run_cli(["demo", "--require-gpu"], capsys)
    assert code == 1
    assert err.startswith("error: trtkit demo needs TensorRT") and err.count("\n") == 1


def test_doctor_reports_failures_with_fixes(capsys):
    code, out, _ = run_cli(["doctor", "--json", "-"], capsys)
    checks = json.loads(out[out.index("["):])
    names = {c["name"]: c for c in checks}
    assert "python" in names
    if code == 1:
        assert any(not c["ok"] and c["fix"] for c in checks)


def test_console_respects_no_color(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    buf = io.StringIO()
    console = make_console(file=buf, width=100)
    console.print("[red]x[/red]")
    assert "\x1b[" not in buf.getvalue()


def test_unwritable_output_is_one_line_and_nothing_is_written(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(models.tiny_conv().SerializeToString())
    code, _, err = run_cli(["build", str(model), "-o", str(tmp_path / "missing" / "m.engine"),
                            "--shapes", "x:1x3x8x8,2x3x8x8,4x3x8x8"], capsys)
    assert code == 1 and err.count("\n") == 1
    assert "folder" in err and "does not exist" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_truncated_onnx_build_is_one_line(tmp_path, capsys):
    data = models.tiny_conv().SerializeToString()
    model = tmp_path / "cut.onnx"
    model.write_bytes(data[: len(data) // 3])
    code, _, err = run_cli(["build", str(model), "--shapes", "x:1x3x8x8"], capsys)
    assert code == 1 and err.count("\n") == 1 and "cut.onnx" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.onnx"]


@pytest.mark.parametrize("command", ["run", "bench", "inspect"])
def test_missing_engine_is_named_before_tensorrt_is_needed(command, tmp_path, capsys):
    code, _, err = run_cli([command, str(tmp_path / "nope.engine")], capsys)
    assert code == 1 and err.count("\n") == 1
    assert "nope.engine" in err and "does not exist" in err


@pytest.mark.parametrize("argv, message", [
    (["--batch", "0"], "--batch 0 is outside the sample model's profile: give 1 to 32"),
    (["--batch", "33"], "--batch 33 is outside the sample model's profile: give 1 to 32"),
    (["--iterations", "0"], "--iterations 0: give at least 1"),
])
def test_demo_bad_options_are_named_before_anything_runs(capsys, argv, message):
    code, out, err = run_cli(["demo", *argv], capsys)
    assert code == 2 and message in err and "Traceback" not in err


def test_demo_output_dir_that_is_a_file_is_refused(capsys, tmp_path):
    afile = tmp_path / "f"
    afile.write_text("x")
    code, out, err = run_cli(["demo", "--output-dir", str(afile)], capsys)
    assert code == 2 and "is a file; give a folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.parametrize("text, sizes", [("8,16,32", (8, 16, 32)), ("8-10,16", (8, 9, 10, 16)), ("4, 2,4", (2, 4))])
def test_batch_size_lists_and_ranges(text, sizes):
    from trtkit.cli.options import batch_sizes

    assert batch_sizes(text) == sizes


@pytest.mark.parametrize("text", ["0", "5-3", "eight", "8,,16", "-4"])
def test_bad_preferred_batch_is_refused_with_the_form_to_use(text, capsys):
    assert cli_main.main(["serve", "e.engine", f"--preferred-batch={text}"]) == 2
    err = capsys.readouterr().err
    assert "argument --preferred-batch" in err and ("e.g. 8,16,32 or 8-32" in err or "(e.g. 8-32)" in err)
