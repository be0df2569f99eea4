#!/usr/bin/env bash
# Download the wheels of scripts/seed_wheels.txt (for the GPU host's Python 3.12, x86_64) into .whl/ at the repo root
# (git-ignored through .git/info/exclude: `echo /.whl/ >> .git/info/exclude`). antlr4-python3-runtime 4.9.3 comes
# only as an sdist: it is built into a pure-Python wheel here.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
grep -v '^#' scripts/seed_wheels.txt | while read -r req; do
  [ -n "$req" ] || continue
  if [ "${req%%==*}" = antlr4-python3-runtime ]; then
    python3 -m pip wheel -q --no-deps -w .whl "$req"
  else
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$req"
  fi
done
du -sh .whl
