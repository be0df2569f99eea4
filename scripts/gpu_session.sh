#!/usr/bin/env bash
# One GPU-host call that runs everything GPU-side and leaves logs and results under $OUT.
# Usage (on the GPU host, through the bundle): bash .gpu/bin/gpu-run bash scripts/gpu_session.sh [STEP ...]
# Steps: env tests demo runner precision crasher (default: env tests demo).
# Caches (timing caches, exported models) live in $TRTKIT_GPU_CACHE (default /root/trtkit-cache); a tarball of the
# small ones is written to $OUT/caches.tar so a later call can bring them back (carry gpu-cache/).
set -u
OUT=${OUT:-/tmp/trtkit-out}; mkdir -p "$OUT"
export TRTKIT_GPU_CACHE=${TRTKIT_GPU_CACHE:-/root/trtkit-cache}; mkdir -p "$TRTKIT_GPU_CACHE"
[ -d gpu-cache ] && cp -n gpu-cache/* "$TRTKIT_GPU_CACHE"/ 2>/dev/null
TACTICS=EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS
steps=${*:-env tests demo}
for step in $steps; do
  echo "=== $step $(date +%T)"
  case $step in
    env) { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 --version;
           python3 -c "import tensorrt, numpy; print('tensorrt', tensorrt.__version__, 'numpy', numpy.__version__)";
           trtkit doctor; } > "$OUT/env.log" 2>&1; tail -20 "$OUT/env.log" ;;
    tests) timeout 560 python3 -m pytest -m gpu -q -rs --timeout 300 -p no:cacheprovider \
             --junitxml="$OUT/gpu-junit.xml" ${GPU_TESTS:-tests} > "$OUT/gpu-tests.log" 2>&1;
           echo "pytest rc=$?"; tail -40 "$OUT/gpu-tests.log" ;;
    demo) trtkit demo --tactic-sources $TACTICS --json "$OUT/demo.json" > "$OUT/demo.log" 2>&1;
          echo "demo rc=$?"; cat "$OUT/demo.log" ;;
    runner) timeout 560 python3 benchmarks/runner_vs_anchors.py --out "$OUT" --cache "$TRTKIT_GPU_CACHE" \
              > "$OUT/runner.log" 2>&1; echo "runner rc=$?"; tail -30 "$OUT/runner.log" ;;
    precision) timeout 560 python3 benchmarks/precision_h200.py --out "$OUT" --cache "$TRTKIT_GPU_CACHE" \
                 > "$OUT/precision.log" 2>&1; echo "precision rc=$?"; tail -30 "$OUT/precision.log" ;;
    crasher) timeout 300 python3 scripts/make_parser_crasher.py --out "$OUT" > "$OUT/crasher.log" 2>&1;
             echo "crasher rc=$?"; tail -20 "$OUT/crasher.log" ;;
    *) echo "unknown step $step" ;;
  esac
done
(cd "$TRTKIT_GPU_CACHE" && find . -maxdepth 1 -type f \( -name '*.cache' -o -name '*.calib' -o -name '*.json' \) -size -8M \
   | tar -cf "$OUT/caches.tar" -T - 2>/dev/null)
ls -la "$OUT"
