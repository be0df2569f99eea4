"""Library messages name Python arguments, never CLI flags; the CLI writes an error's ``field`` as its flag."""

import ast
import re
from pathlib import Path

import pytest

from trtkit import BuildConfig, parse_shapes
from trtkit.builder.constraints import check_applicable
from trtkit.builder.profiles import resolve_profiles
from trtkit.cli.options import FLAGS, flag_message
from trtkit.errors import BuildError, TrtkitError, UsageError

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
    assert {"--calib", "--shapes", "--profile-index", "--batch", "--verbose"} <= TRTKIT_FLAGS


def _raised(call):
    try:
        call()
    except TrtkitError as exc:
        return exc
    raise AssertionError("no error raised")


def _mismatched_engine():
    from trtkit.manifest import Environment, check_manifest

    built = {"environment": {"tensorrt": "10.0.1", "gpu": "H200", "compute_capability": "9.0"}}
    check_manifest(built, engine_path="m.engine", current=Environment(tensorrt="10.3.0", gpu="H200",
                                                                      compute_capability="9.0"))


@pytest.mark.parametrize("call, python, cli", [
    (lambda: BuildConfig(workspace_bytes=0), "workspace_bytes must be an integer >= 1, not 0",
     "--workspace must be an integer >= 1, not 0"),
    (lambda: BuildConfig(optimization_level="3"), "optimization_level must be an integer from 0 to 5, not '3'",
     "--opt-level must be an integer from 0 to 5, not '3'"),
    (lambda: check_applicable("obey", "fp32", strongly_typed=False, explicit_int8=False),
     "precision_constraints 'obey' needs an FP16, BF16 or INT8 build",
     "--precision-constraints 'obey' needs an FP16, BF16 or INT8 build"),
    (_mismatched_engine, "or pass allow_mismatch to try loading it anyway",
     "or pass --ignore-manifest to try loading it anyway"),
    (lambda: resolve_profiles({"x": ["N", 3, 8, 8]}, []), "e.g. batch 1,8,8 (MIN,OPT,MAX), or a profile with every "
     "input, e.g. 'x:1x3x8x8,8x3x8x8,8x3x8x8'", "e.g. --batch 1,8,8 (MIN,OPT,MAX), or a profile with every input"),
    (lambda: resolve_profiles({"x": ["N", 3, "H", 8]}, []), "no optimization profile was given. Give one, e.g. "
     "'x:1x3x1x8,8x3x8x8,8x3x8x8'", "--shapes: The model has dynamic dimensions"),
    (lambda: parse_shapes("x:1x3,8x3,2x3"), "Input 'x': dimension 0 needs min <= opt <= max",
     "--shapes: Input 'x': dimension 0 needs min <= opt <= max"),
])
def test_a_library_message_names_its_argument_and_the_cli_the_flag(call, python, cli):
    exc = _raised(call)
    assert python in str(exc) and "--" not in str(exc), str(exc)
    assert cli in flag_message(exc) and not re.search(r"\b[a-z_]+=", flag_message(exc)), flag_message(exc)


def test_flag_message_names_the_field_by_its_flag():
    assert flag_message(UsageError("workspace_bytes must be an integer >= 1, not 0", field="workspace_bytes")) \
        == "--workspace must be an integer >= 1, not 0"
    assert flag_message(BuildError("Timing cache 't' does not load", field="timing_cache")) \
        == "--timing-cache: Timing cache 't' does not load"
    assert flag_message(UsageError("no field here")) == "no field here"
    assert flag_message(UsageError("Input 'shapes' is missing", field="shapes")) == \
        "--shapes: Input 'shapes' is missing"  # a quoted name is an input's, not the argument


def test_every_flag_in_the_map_exists():
    for field, flag in FLAGS.items():
        for name in re.findall(r"--[a-z0-9-]+", flag):
            assert name in TRTKIT_FLAGS, (field, name)


def test_doctor_command_matches_the_readme():
    from trtkit.doctor import CUDA_PYTHON_RANGES, cuda_python_command

    readme = (ROOT.parent / "README.md").read_text()
    for major, spec in CUDA_PYTHON_RANGES.items():
        line = next(line for line in readme.splitlines() if f"# CUDA {major} driver" in line)
        assert f'pip install -e ".[dev]" "cuda-python{spec}"' in line, line
    assert cuda_python_command(12) == "`pip install --force-reinstall 'cuda-python>=12.6,<13'`"
    assert "CUDA 12 or 13" in cuda_python_command(11)


def test_a_field_inside_a_path_is_left_as_it_is():
    from trtkit.cli.options import flag_message
    from trtkit.errors import UsageError

    error = UsageError("output '/data/output/m.engine' is a folder; give a file path", field="output")
    assert flag_message(error) == "--output '/data/output/m.engine' is a folder; give a file path"
