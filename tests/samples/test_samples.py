"""Every sample's README commands run here as far as a CPU allows: --help always, the run itself where possible."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for p in (ROOT / "samples").iterdir() if (p / "run.py").exists())


def readme_commands(sample: Path) -> list:
    return [line.strip() for line in (sample / "README.md").read_text().splitlines()
            if line.startswith("    python samples/")]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_sample_help(sample):
    proc = subprocess.run([sys.executable, str(sample / "run.py"), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "usage" in proc.stdout


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_sample_readme_first_command_runs_or_names_what_is_missing(sample, tmp_path):
    commands = readme_commands(sample)
    assert commands, f"{sample.name}/README.md shows no command"
    args = commands[0].split()[1:]
    proc = subprocess.run([sys.executable, *args, "--workdir", str(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    if proc.returncode != 0:
        assert re.search(r"needs (TensorRT|an NVIDIA GPU)", proc.stderr), proc.stderr
