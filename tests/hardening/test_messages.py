"""Issue 12, item 3: library messages name Python arguments, never CLI flags; the CLI writes them as its flags."""

import ast
import re
from pathlib import Path

import pytest

from trtkit.cli.options import FLAGS, cli_words, flag_message
from trtkit.errors import BuildError, UsageError

ROOT = Path(__file__).resolve().parents[2] / "trtkit"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")


def _trtkit_flags() -> set:
    """Every long option trtkit's CLI defines (other tools' flags, e.g. pip's, may appear in advice)."""
    from trtkit.cli import main as cli_main

    def walk(parser):
        found = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
        for action in parser._actions:  # subcommands and their own subcommands (export triton)
            for sub in (getattr(action, "choices", None) or {}).values() if action.option_strings == [] else ():
                if hasattr(sub, "_actions"):
                    found |= walk(sub)
        return found

    flags = set()
    for command in cli_main.COMMANDS:
        flags |= walk(cli_main.make_parser(command))
    return flags - {"--help", "--version"}


TRTKIT_FLAGS = _trtkit_flags()


def _docstrings(tree) -> set:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _strings_naming_flags(path: Path) -> list:
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if set(FLAG.findall(node.value)) & TRTKIT_FLAGS:
                where = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT.parent) else path.name
                found.append(f"{where}:{node.lineno}: {node.value.strip()[:80]}")
    return found


def test_no_library_string_names_a_cli_flag():
    library = [p for p in ROOT.rglob("*.py") if not {"cli", "testing"} & set(p.relative_to(ROOT).parts[:-1])]
    assert len(library) > 40
    found = [line for path in sorted(library) for line in _strings_naming_flags(path)]
    assert found == []


def test_the_scan_finds_a_flag_in_a_message(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('"""Docstrings may say --shapes."""\ndef f():\n    raise ValueError(f"give --calib {1} or '
                     'pip --force-reinstall")\n')
    assert [line.split(": ", 1)[1] for line in _strings_naming_flags(probe)] == ["give --calib"]
    assert {"--calib", "--shapes", "--profile-index", "--use-profile", "--verbose"} <= TRTKIT_FLAGS


@pytest.mark.parametrize("library, cli", [
    ("precision_constraints='obey' needs precision='fp16', precision='bf16' or precision='int8'",
     "--precision-constraints obey needs --fp16, --bf16 or --int8"),
    ("use int8_mode='qdq' or strongly_typed=False.", "use --int8-mode qdq or no --strongly-typed."),
    ("calibration.batch_size=2 differs", "--calib-batch 2 differs"),
    ("set allow_mismatch=True to try", "set --ignore-manifest to try"),
    ("Add for example profiles=[parse_shapes('x:1x3,8x3,8x3')]", "Add for example --shapes 'x:1x3,8x3,8x3'"),
    ("pass e.g. shapes={'x': (1, 3, 8, 8)}, or", "pass e.g. --shapes x:1x3x8x8, or"),
    ("qdq_keep_heads=False place Q/DQ nodes", "--qdq-quantize-heads place Q/DQ nodes"),
    ("an engine with shape=(1, 2) and dims=3", "an engine with shape=(1, 2) and dims=3"),  # not arguments: unchanged
    ("one served with ServeSettings(shared_memory=True)); leave shared_memory='none' otherwise",
     "one served with `trtkit serve --shared-memory`); leave --shared-memory none otherwise"),
])
def test_cli_words(library, cli):
    assert cli_words(library) == cli


def test_flag_message_names_the_field_by_its_flag():
    assert flag_message(UsageError("workspace_bytes must be an integer >= 1, not 0 (int)", field="workspace_bytes")) \
        == "--workspace must be an integer >= 1, not 0 (int)"
    assert flag_message(BuildError("Timing cache 't' does not load", field="timing_cache")) \
        == "--timing-cache: Timing cache 't' does not load"
    assert flag_message(UsageError("no field here")) == "no field here"


def test_every_flag_in_the_map_exists(capsys):
    from trtkit.cli import main as cli_main

    cli_main.main(["--help"])
    helps = capsys.readouterr().out
    for command in cli_main.COMMANDS:
        cli_main.main([command, "--help"])
        helps += capsys.readouterr().out
    for field, flag in FLAGS.items():
        for name in re.findall(r"--[a-z0-9-]+", flag):
            assert name in helps, (field, name)


def test_doctor_command_matches_the_readme():
    from trtkit.doctor import CUDA_PYTHON_RANGES, cuda_python_command

    readme = (ROOT.parent / "README.md").read_text()
    for major, spec in CUDA_PYTHON_RANGES.items():
        line = next(line for line in readme.splitlines() if f"# CUDA {major} driver" in line)
        assert f'pip install -e ".[dev]" "cuda-python{spec}"' in line, line
    assert cuda_python_command(12) == "`pip install --force-reinstall 'cuda-python>=12.6,<13'`"
    assert "CUDA 12 or 13" in cuda_python_command(11)
