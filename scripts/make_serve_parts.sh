#!/usr/bin/env bash
# The serve extra for the GPU bundle, in parts: ../shared/gpu/make-bundle leaves out every requirement named nvidia-*
# (it must not pull NVIDIA's CUDA wheels), and so nvidia-pytriton. This downloads it and what it needs that the bundle
# lacks, for the bundle's Python 3.10, and splits them into .gpu/serveNN/serveNN (45 MiB: a part plus the checkout
# must stay under a call's 64 MiB carry). Copy each to /root/trtkit-stash like the bundle's parts; the serve step of
# scripts/gpu_session.sh installs them (--no-deps), numpy<2 too: pytriton 0.7.0's backend stubs answer with empty
# outputs under numpy 2.
# The parts also carry perf_analyzer, NVIDIA's C++ load generator (trtkit bench --server), in sw/perf: the
# binary from the tritonclient 2.51.0 wheel (Triton 2.51.0's client, pytriton 0.7.0's server; later wheels, as the
# bundle's tritonclient, no longer ship it) in libexec/ (gzipped: the parts stay two; the serve step unpacks it),
# libb64.so.0d (Debian's libb64-0d) in lib/, and bin/perf_analyzer,
# a wrapper that puts lib/ on LD_LIBRARY_PATH for perf_analyzer alone. Its libcudart.so.12 is linked into lib/ at run
# time from pytriton's wheel (scripts/gpu_session.sh's serve step).
# Usage: bash scripts/make_serve_parts.sh        (needs pyenv's Python 3.10, as make-bundle does, and apt-get update
#        run once: apt-get download fetches libb64-0d)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# awk reads every line (grep -m1 would stop early, and pyenv's SIGPIPE fail the script under pipefail)
PY=${PYENV_310:-$(pyenv root)/versions/$(pyenv versions --bare | awk '/^3\.10\./ && !found { print; found = 1 }')}/bin/python3.10
WORK=$(mktemp -d /tmp/trtkit-serve.XXXX); trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/all" "$WORK/sw"

perf_analyzer() { # DEST: DEST/libexec/perf_analyzer.gz, DEST/lib/libb64.so.0d, DEST/bin/perf_analyzer (the wrapper)
  local dest=$1 pa=$WORK/pa
  mkdir -p "$pa" "$dest"/{bin,lib,libexec}
  PIP_CONSTRAINT= "$PY" -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 -d "$pa" \
    "tritonclient==2.51.0"
  "$PY" -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read(
    "tritonclient-2.51.0.data/data/bin/perf_analyzer"))' "$pa"/tritonclient-2.51.0-*.whl "$dest/libexec/perf_analyzer"
  (cd "$pa" && apt-get download -q libb64-0d >/dev/null 2>&1) \
    || { echo "apt-get download libb64-0d failed: run apt-get update first" >&2; exit 1; }
  dpkg-deb -x "$pa"/libb64-0d_*.deb "$pa/deb"
  cp "$pa/deb/usr/lib/x86_64-linux-gnu/libb64.so.0d" "$dest/lib/"
  cat > "$dest/bin/perf_analyzer" <<'SH'
#!/bin/sh
# perf_analyzer with its libraries (libb64.so.0d, libcudart.so.12) on LD_LIBRARY_PATH, for it alone
here=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$here/libexec/perf_analyzer" "$@"
SH
  chmod 755 "$dest/bin/perf_analyzer" "$dest/libexec/perf_analyzer"
  gzip -9 "$dest/libexec/perf_analyzer"
}
PIP_CONSTRAINT= "$PY" -m pip download -q --only-binary=:all: -d "$WORK/all" "nvidia-pytriton>=0.7" "numpy<2"
# what the bundle has already (tritonclient, grpcio, protobuf, aiohttp, ...) stays out; numpy<2 replaces the bundle's
# numpy 2 (pytriton's stubs are built against numpy 1: trtkit serve refuses numpy 2)
for w in nvidia_pytriton numpy-1 pyzmq sh- wrapt typing_inspect mypy_extensions typer shellingham annotated_doc \
         importlib_metadata zipp; do cp "$WORK"/all/${w}*.whl "$WORK/sw/"; done
perf_analyzer "$WORK/sw/perf"
tar -C "$WORK" -cf "$WORK/serve.tar" sw
rm -rf "$ROOT"/.gpu/serve[0-9][0-9]
(cd "$WORK" && split -b 45M -d -a 2 serve.tar serve)
for p in "$WORK"/serve[0-9][0-9]; do b=$(basename "$p"); mkdir -p "$ROOT/.gpu/$b"; mv "$p" "$ROOT/.gpu/$b/$b"; done
ls -la "$ROOT"/.gpu/serve[0-9][0-9]/
