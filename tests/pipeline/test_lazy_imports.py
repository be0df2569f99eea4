"""trtkit.pipeline and ``trtkit run --help`` import without PyAV, PyNvVideoCodec, TensorRT or cuda-python; a video
asked for without PyAV says how to install it."""

from __future__ import annotations

import subprocess
import sys

BLOCKER = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in ("av", "PyNvVideoCodec", "tensorrt") or name.startswith("cuda"):
            raise ImportError(f"blocked for this test: {name}")
        return None
sys.meta_path.insert(0, _Block())
"""


def _run(code: str):
    return subprocess.run([sys.executable, "-c", BLOCKER + code], capture_output=True, text=True, timeout=120)


def test_every_pipeline_module_imports_without_video_or_gpu_packages():
    proc = _run("""
import importlib, pkgutil, trtkit.pipeline
names = [i.name for i in pkgutil.walk_packages(trtkit.pipeline.__path__, "trtkit.pipeline.")] + ["trtkit.cli.pipeline"]
for name in names:
    importlib.import_module(name)
import trtkit.pipeline as p
p.run_engine, p.VideoSource, p.VideoSink
assert not [m for m in sys.modules if m.split(".")[0] in ("av", "PyNvVideoCodec", "tensorrt")]
print("imported", len(names))
""")
    assert proc.returncode == 0, proc.stderr
    assert "imported" in proc.stdout


def test_run_help_and_a_video_without_pyav(tmp_path):
    video = tmp_path / "in.mp4"
    video.write_bytes(b"0" * 16)
    proc = _run(f"""
from trtkit.cli.main import main
assert main(["run", "--help"]) == 0
sys.exit(main(["run", "x.engine", "--video", {str(video)!r}, "--decoder", "pyav"]))
""")
    assert proc.returncode == 1, proc.stderr
    assert "--video" in proc.stdout
    assert "PyAV is not installed; run `pip install 'trtkit[video]'`" in proc.stderr
