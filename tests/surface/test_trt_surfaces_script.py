"""scripts/trt_surfaces.py and scripts/support_matrix.py on their own: fast CPU tests (default tier).

The wheel download is exercised by the ``surface`` tier (it needs the package index); here: tool checks, symbol
classification, stub compilation, the shim, and the matrix rendering.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


surfaces = _load("trt_surfaces")
matrix = _load("support_matrix")


def test_missing_tools_are_named_with_how_to_install(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    with pytest.raises(surfaces.SurfaceError, match=r"Missing tools: gcc, nm, readelf \(or objdump\).*apt-get"):
        surfaces.check_tools()


def test_wheel_names_per_version():
    assert surfaces.wheel_requirement("8.6.1") == "tensorrt-bindings==8.6.1"
    assert surfaces.wheel_requirement("10.8.0.43") == "tensorrt-cu12-bindings==10.8.0.43"
    assert surfaces.wheel_requirement("11.4.0.106", cuda="13") == "tensorrt-cu13-bindings==11.4.0.106"


def test_symbols_go_to_the_library_that_exports_them():
    libs = ["libnvinfer.so.8", "libnvonnxparser.so.8", "libnvparsers.so.8", "libnvinfer_plugin.so.8"]
    assert surfaces.library_of("createInferBuilder_INTERNAL", libs) == "libnvinfer.so.8"
    assert surfaces.library_of("createNvOnnxParser_INTERNAL", libs) == "libnvonnxparser.so.8"
    assert surfaces.library_of("_ZN11nvuffparser15createUffParserEv", libs) == "libnvparsers.so.8"
    assert surfaces.library_of("initLibNvInferPlugins", libs) == "libnvinfer_plugin.so.8"
    # 10+ has no libnvparsers: anything unknown lands in libnvinfer (the loader resolves symbols globally)
    assert surfaces.library_of("_ZN11nvuffparser15createUffParserEv", ["libnvinfer.so.10"]) == "libnvinfer.so.10"


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("nm") and shutil.which("readelf")),
                    reason="needs gcc, nm and readelf")
def test_stub_exports_exactly_the_symbols_with_its_soname(tmp_path):
    symbols = ["createInferRuntime_INTERNAL", "_ZN14nvcaffeparser117createCaffeParserEv"]
    lib = surfaces.compile_stub("libnvinfer.so.42", symbols, tmp_path)
    exported = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    names = {line.split()[-1] for line in exported.splitlines() if " T " in line}
    assert names == set(symbols)
    dynamic = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    assert "Library soname: [libnvinfer.so.42]" in dynamic
    import ctypes

    assert ctypes.CDLL(str(lib)).createInferRuntime_INTERNAL() == 0  # returns NULL


def test_a_surface_is_prepared_only_for_its_version_and_python(tmp_path):
    marker = {"version": "10.8.0.43", "python": surfaces.python_tag(), "format": surfaces.FORMAT, "stubs": {}}
    (tmp_path / surfaces.MARKER).write_text(json.dumps(marker))
    assert surfaces.prepared(tmp_path, "10.8.0.43") == marker
    assert surfaces.prepared(tmp_path, "10.9.0.34") is None
    marker["python"] = "cp39"
    (tmp_path / surfaces.MARKER).write_text(json.dumps(marker))
    assert surfaces.prepared(tmp_path, "10.8.0.43") is None


def _results(version: str, features: dict, failed: tuple = ()) -> dict:
    checks = {name: {"ok": False, "error": f"{name} broke"} for name in failed}
    return {"version": version, "checks": checks,
            "features": {k: {"value": v, "check": "c"} for k, v in features.items()},
            "api": {"used": ["BuilderFlag.FP16"] if features.get("fp16_flag") else [],
                    "absent_probed": [] if features.get("fp16_flag") else ["BuilderFlag.FP16"]}}


def _row(text: str, version: str) -> list:
    line = next(line for line in text.splitlines() if line.startswith(f"| {version} |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_matrix_cells_say_how_each_is_proven(tmp_path):
    results = {"8.6.1": _results("8.6.1", {"fp32": True, "fp16_flag": True, "calibrator_entropy": True,
                                           "calibrator_minmax": True}),
               "11.4.0.106": _results("11.4.0.106", {"fp32": True, "fp16_flag": False, "calibrator_entropy": False,
                                                     "calibrator_minmax": False},
                                      failed=("build_int8_qdq",))}
    gpu = tmp_path / "h200.json"
    gpu.write_text(json.dumps({"tensorrt_version": "8.6.0", "device": "H200",
                               "features": {"fp32": True, "cuda_graphs": "pass", "bf16": False}}))
    text = matrix.render(results, matrix.gpu_evidence([gpu]))
    row86 = _row(text, "8.6.1")
    row11 = _row(text, "11.4.0.106")
    cols = ["TensorRT"] + list(matrix.COLUMNS)
    assert row86[cols.index("FP32")] == "yes — GPU (8.6.0, H200), API surface"
    assert row86[cols.index("CUDA graphs")] == "yes — GPU (8.6.0, H200)"
    assert row86[cols.index("BF16")] == "not proven"
    assert row86[cols.index("Calibrators")] == "entropy, minmax — API surface"
    assert row11[cols.index("FP16 (builder flag)")] == "no — absent in this TensorRT (API surface)"
    assert row11[cols.index("Calibrators")] == "none — absent in this TensorRT (API surface)"
    assert "- 11.4.0.106: `build_int8_qdq` — build_int8_qdq broke" in text
    assert "| `BuilderFlag.FP16` | used | absent, avoided |" in text


def test_gpu_tests_marked_proves_write_the_evidence_the_matrix_reads(tmp_path):
    (tmp_path / "tensorrt.py").write_text('__version__ = "8.6.0"\n')
    (tmp_path / "test_gpu_like.py").write_text(
        "import pytest\n"
        "@pytest.mark.proves('fp32', 'cuda_graphs')\ndef test_a():\n    pass\n"
        "@pytest.mark.proves('fp16_flag')\ndef test_b():\n    assert False\n"
        "@pytest.mark.proves('int8_qdq')\ndef test_c():\n    pytest.skip('no GPU')\n")
    out = tmp_path / "gpu-results" / "h200.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]), TRTKIT_GPU_RESULTS=str(out))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.surface.gpu_evidence", "-p",
                           "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_gpu_like.py")],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "1 failed, 1 passed, 1 skipped" in proc.stdout, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["tensorrt_version"] == "8.6.0"
    assert data["features"] == {"cuda_graphs": True, "fp16_flag": False, "fp32": True}
    row = _row(matrix.render({"8.6.1": _results("8.6.1", {})}, matrix.gpu_evidence([out])), "8.6.1")
    assert row[1] == "yes — GPU (8.6.0, GPU)" and row[2] == "not proven"


BINDINGS_INIT = '''import ctypes, os
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "tensorrt.so"))
__version__ = "99.0.0"
class BuilderFlag:
    __members__ = {"TF32": 0}
'''


def _fake_bindings_wheel(tmp_path: Path, wheels: Path) -> Path:
    """A bindings-shaped wheel whose tensorrt.so needs libnvinfer.so.99 for one symbol (built with gcc)."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "nvinfer.c").write_text("void *createInferBuilder_INTERNAL(void *l, int v) { return (void *)42; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libnvinfer.so.99", "-o", str(real / "libnvinfer.so.99"),
                    str(real / "nvinfer.c")], check=True)
    (real / "binding.c").write_text("void *createInferBuilder_INTERNAL(void *, int);\n"
                                    "int make(void) { return (int)(long)createInferBuilder_INTERNAL(0, 0); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(real / "tensorrt.so"), str(real / "binding.c"),
                    str(real / "libnvinfer.so.99")], check=True)
    import zipfile

    wheels.mkdir(parents=True)
    wheel = wheels / f"tensorrt_cu12_bindings-99.0.0-{surfaces.python_tag()}-none-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("tensorrt_bindings/__init__.py", BINDINGS_INIT)
        archive.write(real / "tensorrt.so", "tensorrt_bindings/tensorrt.so")
    return wheel


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("nm") and shutil.which("readelf")),
                    reason="needs gcc, nm and readelf")
def test_prepare_stubs_what_the_binding_needs_and_caches_the_result(tmp_path):
    root = tmp_path / "surfaces"
    _fake_bindings_wheel(tmp_path, root / "_wheels")
    marker = surfaces.prepare("99.0.0", root)
    assert marker["stubs"] == {"libnvinfer.so.99": ["createInferBuilder_INTERNAL"]}
    assert marker["imported_version"] == "99.0.0"
    code = "import tensorrt, ctypes; print(tensorrt.__name__, tensorrt._lib.make())"
    env = dict(os.environ, PYTHONPATH=str(root / "99.0.0"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["tensorrt_bindings", "0"]  # the stub's NULL, not the real library's 42
    stamp = (root / "99.0.0" / surfaces.MARKER).stat().st_mtime_ns
    assert surfaces.prepare("99.0.0", root) == marker
    assert (root / "99.0.0" / surfaces.MARKER).stat().st_mtime_ns == stamp  # cached: nothing rebuilt
