#!/usr/bin/env bash
# The serve extra for the GPU bundle, in parts: ../shared/gpu/make-bundle leaves out every requirement named nvidia-*
# (it must not pull NVIDIA's CUDA wheels), and so nvidia-pytriton. This downloads it and what it needs that the bundle
# lacks, for the bundle's Python 3.10, and splits them into .gpu/serveNN/serveNN (45 MiB: a part plus the checkout
# must stay under a call's 64 MiB carry). Copy each to /root/trtkit-stash like the bundle's parts; the serve step of
# scripts/gpu_session.sh installs them (--no-deps), numpy<2 too: pytriton 0.7.0's backend stubs answer with empty
# outputs under numpy 2.
# Usage: bash scripts/make_serve_parts.sh        (needs pyenv's Python 3.10, as make-bundle does)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYENV_310:-$(pyenv root)/versions/$(pyenv versions --bare | grep -m1 '^3\.10\.')}/bin/python3.10
WORK=$(mktemp -d /tmp/trtkit-serve.XXXX); trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/all" "$WORK/sw"
PIP_CONSTRAINT= "$PY" -m pip download -q --only-binary=:all: -d "$WORK/all" "nvidia-pytriton>=0.7" "numpy<2"
# what the bundle has already (tritonclient, grpcio, protobuf, aiohttp, ...) stays out; numpy<2 replaces the bundle's
# numpy 2 (pytriton's stubs are built against numpy 1: trtkit serve refuses numpy 2)
for w in nvidia_pytriton numpy-1 pyzmq sh- wrapt typing_inspect mypy_extensions typer shellingham annotated_doc \
         importlib_metadata zipp; do cp "$WORK"/all/${w}*.whl "$WORK/sw/"; done
tar -C "$WORK" -cf "$WORK/serve.tar" sw
rm -rf "$ROOT"/.gpu/serve[0-9][0-9]
(cd "$WORK" && split -b 45M -d -a 2 serve.tar serve)
for p in "$WORK"/serve[0-9][0-9]; do b=$(basename "$p"); mkdir -p "$ROOT/.gpu/$b"; mv "$p" "$ROOT/.gpu/$b/$b"; done
ls -la "$ROOT"/.gpu/serve[0-9][0-9]/
