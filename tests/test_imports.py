"""`import trtkit`, every submodule and `trtkit --help` work without TensorRT, cuda-python or a GPU."""

import pkgutil
import subprocess
import sys

import trtkit

BLOCKER = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        blocked = ("tensorrt", "tensorrt_bindings", "pycuda", "cupy", "torch")
        if name.split(".")[0] in blocked or name.startswith("cuda"):
            raise ImportError(f"blocked for this test: {name}")
        return None
sys.meta_path.insert(0, _Block())
"""


def _submodules():
    import calibrators

    names = []
    for pkg in (trtkit, calibrators):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            names.append(info.name)
    return names


def test_every_submodule_imports_without_heavy_dependencies():
    modules = _submodules()
    assert "trtkit.builder.builder" in modules and "trtkit.runtime.runner" in modules
    code = BLOCKER + f"""
import importlib
for name in {modules!r}:
    importlib.import_module(name)
heavy = [m for m in sys.modules if m.split(".")[0] == "tensorrt" or m.startswith(("cuda.bindings", "cuda.cudart"))]
assert not heavy, heavy
print("imported", {len(modules)})
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"imported {len(modules)}" in proc.stdout


def test_cli_help_without_heavy_dependencies():
    code = BLOCKER + "from trtkit.cli.main import main; sys.exit(main(['--help']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "build" in proc.stdout and "doctor" in proc.stdout


def test_lazy_public_names_raise_attribute_error_for_unknown():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        trtkit.Nope  # noqa: B018
