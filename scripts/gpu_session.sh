#!/usr/bin/env bash
# One GPU-host call that runs GPU-side steps and brings back logs and results through $OUT.
# Usage (on the GPU host, through the bundle): bash .gpu/bin/gpu-run bash scripts/gpu_session.sh [STEP ...]
# scripts/gpu_background.sh runs steps as background chains that outlive the call starting them.
# Steps: env tests ptests int64 demo crasher runner precision detection qdq pipeline realdet realcls backend real_models
# overhead seed_export seed_data seed_train seed_compare seed_models timing_cache modelopt serve live (default: env tests demo).
# seed_export needs the wheels of scripts/seed_wheels.txt carried in .whl/ (scripts/fetch_seed_wheels.sh); modelopt
# those of scripts/modelopt_wheels.txt in .whl-modelopt/.
# serve first installs the serve extra (nvidia-pytriton and what it needs, from .gpu/serveNN parts copied to
# /root/trtkit-stash like the bundle's parts) into the bundle, then runs the serve GPU test and benchmarks/serve_h200.py.
# Everything lands in $OUT/results.tar (logs, JSON, junit) and $OUT/caches.tar (timing/calibration caches and small
# models, to carry back in gpu-cache/ so a later call skips slow first builds).
set -u
OUT=${OUT:-/tmp/trtkit-out}; mkdir -p "$OUT"
W=/tmp/trtkit-results; mkdir -p "$W"
export TRTKIT_GPU_CACHE=${TRTKIT_GPU_CACHE:-/root/trtkit-cache}; mkdir -p "$TRTKIT_GPU_CACHE"
export TRTKIT_PARITY_OUT=$W TRTKIT_GPU_RESULTS=$W/gpu-proofs.json
[ -d gpu-cache ] && cp -rn gpu-cache/. "$TRTKIT_GPU_CACHE"/ 2>/dev/null
TACTICS=EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS
# TensorRT 8.6 links a CUDA runtime that loads every kernel module eagerly unless told otherwise: each process
# (and each isolated build child) then pays seconds at start.
export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-LAZY}
for step in ${*:-env tests demo}; do
  echo "=== $step $(date +%T)"
  case $step in
    env) { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 --version;
           python3 -c "import tensorrt, numpy; print('tensorrt', tensorrt.__version__, 'numpy', numpy.__version__)";
           lscpu | grep -E "^(CPU\(s\)|On-line|Thread|Core|Socket|Model name|NUMA node\(s\))";
           echo "cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo none)";
           trtkit doctor; } > "$W/env.log" 2>&1; tail -24 "$W/env.log" ;;
    tests) # SIGINT at the limit (then SIGKILL 20 s later): pytest stops and still prints the failures so far
           rm -f "$W/gpu-junit.xml"; timeout -s INT -k 20 ${TESTS_TIMEOUT:-540} python3 -m pytest -m gpu -v -rs --timeout 240 \
             -o faulthandler_timeout=200 -p no:cacheprovider --durations=15 --junitxml="$W/gpu-junit.xml" ${GPU_TESTS:-tests} \
             ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} > "$W/gpu-tests.log" 2>&1;
           echo "pytest rc=$?"; grep -E "(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" "$W/gpu-tests.log" | grep -v "^tests.*PASSED" | tail -40; grep -c PASSED "$W/gpu-tests.log" ;;
    ptests) # groups of test files at once (GPU_GROUPS: groups separated by ';'), each its own pytest process: the
            # tests wait mostly on CUDA and TensorRT start-up, which the processes then pay side by side
            i=0; IFS=';' read -ra groups <<< "${GPU_GROUPS:-tests}"
            for g in "${groups[@]}"; do i=$((i+1))
              timeout -s INT -k 20 ${TESTS_TIMEOUT:-300} python3 -m pytest -m gpu -v -rs --timeout 240 -p no:cacheprovider \
                --durations=10 $g > "$W/gpu-tests-$i.log" 2>&1 &
            done; wait
            for f in "$W"/gpu-tests-*.log; do echo "--- $f"; grep -E "FAILED|ERROR|SKIPPED|passed|failed" "$f" | tail -12; done
            # a test that failed beside the other groups runs again alone: tests of the device's free memory see
            # the other processes' allocations
            failed=$(grep -hoE "^tests/gpu/[^ ]+ (FAILED|ERROR)" "$W"/gpu-tests-*.log | cut -d' ' -f1 | sort -u)
            if [ -n "$failed" ]; then
              timeout -s INT -k 20 ${RERUN_TIMEOUT:-240} python3 -m pytest -m gpu -v -rs --timeout 200 -p no:cacheprovider \
                $failed > "$W/gpu-tests-alone.log" 2>&1; echo "alone rc=$?"; grep -E "PASSED|FAILED|ERROR|passed|failed" "$W/gpu-tests-alone.log" | tail -12
            fi ;;
    int64) # a hang seen once here: Python stacks of every thread after 60 s, then the test is killed (thread method)
           timeout 200 python3 -m pytest -m gpu -v -rs -p no:cacheprovider --timeout 150 --timeout-method=thread \
             -o faulthandler_timeout=60 tests/gpu/test_prepare_gpu.py -k int64 > "$W/int64.log" 2>&1;
           echo "int64 rc=$?"; tail -60 "$W/int64.log" ;;
    demo) trtkit demo --tactic-sources $TACTICS --json "$W/demo.json" > "$W/demo.log" 2>&1;
          echo "demo rc=$?"; cat "$W/demo.log" ;;
    crasher) timeout 240 python3 scripts/make_parser_crasher.py /tmp/crasher > "$W/crasher.log" 2>&1;
             echo "crasher rc=$?"; cp /tmp/crasher/*.json "$W"/ 2>/dev/null; tail -15 "$W/crasher.log" ;;
    runner) cp benchmarks/results/runner-h200.json "$W/runner-h200.before.json"  # the run overwrites the committed file
            timeout ${RUNNER_TIMEOUT:-540} python3 benchmarks/runner_vs_anchors.py --out "$W" --cache "$TRTKIT_GPU_CACHE" ${RUNNER_ARGS:-} \
              > "$W/runner.log" 2>&1; echo "runner rc=$?"; tail -25 "$W/runner.log"
            python3 scripts/compare_results.py "$W/runner-h200.before.json" "$W/runner-h200.json" > "$W/runner-compare.txt" 2>&1;
            echo "compare rc=$?"; tail -30 "$W/runner-compare.txt" ;;
    detection) timeout ${DETECTION_TIMEOUT:-560} python3 benchmarks/detection_h200.py --out "$W/det" --cache "$TRTKIT_GPU_CACHE/det" \
                 --budget ${DETECTION_BUDGET:-420} ${DETECTION_ARGS:-} > "$W/detection.log" 2>&1; echo "detection rc=$?"; tail -30 "$W/detection.log" ;;
    qdq) # caches at the top of $TRTKIT_GPU_CACHE: caches.tar carries them to the next call (timing cache, calibration)
         timeout ${QDQ_TIMEOUT:-560} python3 benchmarks/qdq_placement_h200.py --out "$W/qdq" --cache "$TRTKIT_GPU_CACHE" \
           --budget ${QDQ_BUDGET:-280} ${QDQ_ARGS:-} > "$W/qdq.log" 2>&1; echo "qdq rc=$?"; tail -30 "$W/qdq.log" ;;
    pipeline) timeout ${PIPELINE_TIMEOUT:-400} python3 benchmarks/pipeline_h200.py --out "$W/pipeline" ${PIPELINE_ARGS:-} \
                > "$W/pipeline.log" 2>&1;
              echo "pipeline rc=$?"; tail -30 "$W/pipeline.log" ;;
    probe) timeout ${PROBE_TIMEOUT:-120} python3 scripts/nvdec_probe.py ${PROBE_ARGS:-} > "$W/nvdec-probe.json" 2> "$W/nvdec-probe.log";
           echo "probe rc=$?"; cat "$W/nvdec-probe.json"; grep -v "INVALID INDEX" "$W/nvdec-probe.log" | tail -20 ;;
    realdet) # the detection sample's detector (FP16, opt level 1, batch 1-16) on the pipeline sample's video of
             # shapes (H.264, 1280x720), through `trtkit run --post detection` with each decoder; detections compared
             D=$W/realdet; mkdir -p "$D"; cp "$TRTKIT_GPU_CACHE/detector-timing.cache" "$D/timing.cache" 2>/dev/null
             E=$TRTKIT_GPU_CACHE/detector-fp16-b16.engine  # kept (caches.tar) for a later call
             S=3x320x320; [ -f "$E" ] || { timeout ${REALDET_BUILD_TIMEOUT:-200} trtkit build samples/detection/model/detector.onnx --fp16 \
               --opt-level 1 --shapes images:1x$S,8x$S,16x$S --timing-cache "$D/timing.cache" --tactic-sources $TACTICS -o "$E" \
               > "$D/build.log" 2>&1; echo "build rc=$?"; tail -3 "$D/build.log"; }
             cp "$E" "$D/model.engine"
             python3 -c "import sys; sys.path.insert(0, 'samples/pipeline'); from pathlib import Path; import run; \
               run.shapes_video(Path('$D/shapes.mp4'), ${REALDET_FRAMES:-600}, size=(1280, 720), codec='libx264')"
             for dec in nvdec pyav; do
               timeout 90 trtkit run "$D/model.engine" --video "$D/shapes.mp4" --out "$D/out-$dec.mp4" --results "$D/res-$dec.jsonl" \
                 --post detection --decoder $dec --no-live --json "$D/run-$dec.json" > "$D/run-$dec.log" 2>&1; echo "run $dec rc=$?"; tail -6 "$D/run-$dec.log"
             done
             python3 scripts/compare_runs.py "$D/res-nvdec.jsonl" "$D/res-pyav.jsonl" | tee "$D/compare.json"
             cp "$D/timing.cache" "$TRTKIT_GPU_CACHE/detector-timing.cache" 2>/dev/null
             rm -f "$D"/*.mp4 "$D/model.engine" "$D/timing.cache" ;;
    realcls) # a torchvision classifier from outside the project (random weights, exported here) on the pipeline
             # sample's video of shapes through `trtkit run` (raw outputs): NVDEC with the GPU letterbox, NVDEC with
             # the CPU letterbox, PyAV; the outputs compared pairwise (the letterbox's part, the decoder's part)
             D=$W/realcls; mkdir -p "$D"; M=${REALCLS_MODEL:-mobilenet_v3_large}; O=/tmp/$M.onnx
             /opt/torch/.venv/bin/python3 scripts/export_torchvision.py $M "$O" > "$D/export.log" 2>&1; echo "export rc=$?"
             E=$TRTKIT_GPU_CACHE/$M-fp16-b16.engine; S=3x224x224
             [ -f "$E" ] || { timeout ${REALCLS_BUILD_TIMEOUT:-200} trtkit build "$O" --fp16 --shapes images:1x$S,8x$S,16x$S \
               --timing-cache "$TRTKIT_GPU_CACHE/$M-timing.cache" --tactic-sources $TACTICS -o "$E" > "$D/build.log" 2>&1;
               echo "build rc=$?"; tail -3 "$D/build.log"; }
             python3 -c "import sys; sys.path.insert(0, 'samples/pipeline'); from pathlib import Path; import run; \
               run.shapes_video(Path('$D/shapes.mp4'), ${REALCLS_FRAMES:-200}, size=(1280, 720), codec='libx264')"
             for how in "nvdec gpu" "nvdec cpu" "pyav cpu"; do set -- $how; tag=$1-$2
               timeout 90 trtkit run "$E" --video "$D/shapes.mp4" --results "$D/res-$tag.jsonl" --decoder $1 --preprocess $2 \
                 --no-live --json "$D/run-$tag.json" > "$D/run-$tag.log" 2>&1; echo "run $tag rc=$?"; tail -4 "$D/run-$tag.log"
             done
             for pair in "nvdec-gpu nvdec-cpu" "nvdec-cpu pyav-cpu" "nvdec-gpu pyav-cpu"; do set -- $pair
               echo "$1 vs $2: $(python3 scripts/compare_runs.py "$D/res-$1.jsonl" "$D/res-$2.jsonl")" | tee -a "$D/compare.txt"
             done
             rm -f "$D"/*.mp4 "$D"/*.jsonl ;;
    backend) timeout ${BACKEND_TIMEOUT:-480} python3 scripts/onnx_backend_suite.py --jobs ${BACKEND_JOBS:-12} \
               --budget-s ${BACKEND_BUDGET:-300} --work-dir /tmp/onnx-cases --out "$W/onnx-backend.json" \
               --doc "$W/onnx-support.md" ${BACKEND_ARGS:-} > "$W/backend.log" 2>&1; echo "backend rc=$?"; tail -20 "$W/backend.log" ;;
    real_models) # the real-model scoreboard; resumes from the results file kept in the cache (caches.tar), so each
                 # call adds cases; REAL_ARGS e.g. "--only NAME" or "--redo NAME"
                 F=$TRTKIT_GPU_CACHE/real-models.json; [ -f "$F" ] || cp benchmarks/results/real-models-8.6.0.json "$F" 2>/dev/null
                 timeout ${REAL_TIMEOUT:-570} python3 scripts/real_models.py --budget-s ${REAL_BUDGET:-480} --out "$F" \
                   --work-dir /tmp/real-models ${REAL_ARGS:-} > "$W/real-models.log" 2>&1; echo "real_models rc=$?"
                 cp "$F" "$W/real-models-8.6.0.json"; tail -25 "$W/real-models.log" ;;
    overhead) # the issue's two models: the digits CNN and ResNet-50 (exported once into the cache, random weights)
              R=$TRTKIT_GPU_CACHE/resnet50.onnx
              [ -f "$R" ] || /opt/torch/.venv/bin/python3 scripts/export_torchvision.py resnet50 "$R" > "$W/overhead-export.log" 2>&1
              timeout ${OVERHEAD_TIMEOUT:-540} python3 benchmarks/build_overhead.py --repeats ${OVERHEAD_REPEATS:-1} \
                --resnet50 "$R" --out "$W/build-overhead-h200.json" ${OVERHEAD_ARGS:-} > "$W/overhead.log" 2>&1; echo "overhead rc=$?";
              tail -15 "$W/overhead.log" ;;
    seed_export) # the seed systems' real models (scripts/export_seed_models.py), exported once into the cache
                 # (models already there are left out); SEED_ARGS e.g. "--only rtdetr"
                 rm -rf /tmp/site && /opt/torch/.venv/bin/python3 -m pip install -q --no-index --no-deps --no-compile \
                   --target /tmp/site .whl/*.whl > "$W/seed-export.log" 2>&1; echo "seed wheels rc=$?"
                 PYTHONPATH=/tmp/site timeout ${SEED_TIMEOUT:-500} /opt/torch/.venv/bin/python3 scripts/export_seed_models.py \
                   "$TRTKIT_GPU_CACHE/seed" --skip-existing ${SEED_ARGS:-} >> "$W/seed-export.log" 2>&1; echo "seed_export rc=$?"
                 cp "$TRTKIT_GPU_CACHE"/seed/*.json "$W"/ 2>/dev/null; grep -E "^[a-z0-9-]+: |^exported" "$W/seed-export.log" ;;
    seed_train) # YOLOv8n and RF-DETR nano trained on the shapes set (scripts/train_seed_models.py), for accuracy figures
                # that mean something; the seed wheels as seed_export installs them; TRAIN_ARGS e.g. "--epochs 30 --batch 16"
                [ -d /tmp/site/ultralytics ] || /opt/torch/.venv/bin/python3 -m pip install -q --no-index --no-deps --no-compile \
                  --target /tmp/site .whl/*.whl > "$W/seed-train.log" 2>&1
                PYTHONPATH=/tmp/site timeout ${TRAIN_TIMEOUT:-560} /opt/torch/.venv/bin/python3 scripts/train_seed_models.py \
                  "$TRTKIT_GPU_CACHE/shapes" "$TRTKIT_GPU_CACHE/trained" --models ${TRAIN_MODELS:-yolov8n rfdetr-nano} --device 0 \
                  ${TRAIN_ARGS:---epochs 30} >> "$W/seed-train.log" 2>&1; echo "seed_train rc=$?"
                cp "$TRTKIT_GPU_CACHE"/trained/*.json "$W"/ 2>/dev/null; tail -5 "$W/seed-train.log" ;;
    precision) cp benchmarks/results/precision-h200.json "$W/precision-h200.before.json"
               timeout ${PRECISION_TIMEOUT:-540} python3 benchmarks/precision_h200.py --out "$W" --cache "$TRTKIT_GPU_CACHE" \
                 --merge "$TRTKIT_GPU_CACHE/precision-h200.json" ${PRECISION_ARGS:-} \
                 > "$W/precision.log" 2>&1; echo "precision rc=$?"; tail -25 "$W/precision.log"
               python3 scripts/compare_results.py "$W/precision-h200.before.json" "$W/precision-h200.json" \
                 > "$W/precision-compare.txt" 2>&1; echo "compare rc=$?"; tail -40 "$W/precision-compare.txt" ;;
    serve) # pytriton 0.7.0's backend stubs need numpy<2 (under numpy 2 every answer has no output data), so the numpy
           # wheel that came with its requirements replaces the bundle's 2.x: run serve as the last step of a call
           if ! python3 -c "import sys, numpy, pytriton; sys.exit(int(numpy.__version__.split('.')[0]) >= 2)" 2>/dev/null \
              || [ ! -f /tmp/sw/perf/libexec/perf_analyzer ]; then
             rm -rf /tmp/sw; cat /root/trtkit-stash/serve* | tar -x -C /tmp \
               && python3 -m pip install -q --no-index --no-deps /tmp/sw/*.whl > "$W/serve-install.log" 2>&1
             echo "serve extra install rc=$?"; gzip -d /tmp/sw/perf/libexec/perf_analyzer.gz 2>/dev/null; fi
           python3 -c "import numpy; print('numpy', numpy.__version__)"
           # perf_analyzer (trtkit bench --server's load; its wrapper puts /tmp/sw/perf/lib on LD_LIBRARY_PATH for
           # it alone, so the server's libraries stay as they were): libcudart.so.12 is pytriton's (renamed by
           # auditwheel, libcudart-<hash>.so.12.*), linked there under the name perf_analyzer asks for
           if [ -f /tmp/sw/perf/libexec/perf_analyzer ]; then
             ln -sf "$(python3 -c "import glob, os, pytriton; print(sorted(glob.glob(os.path.join(os.path.dirname(
               os.path.dirname(pytriton.__file__)), 'nvidia_pytriton.libs', 'libcudart-*.so.12*')))[-1])")" \
               /tmp/sw/perf/lib/libcudart.so.12
             export PERF_ANALYZER=/tmp/sw/perf/bin/perf_analyzer
             echo "perf_analyzer: $($PERF_ANALYZER --version 2>&1 | head -1) $(LD_LIBRARY_PATH=/tmp/sw/perf/lib ldd \
               /tmp/sw/perf/libexec/perf_analyzer | grep 'not found' | tr -s '\t\n' '  ')"
           fi
           # Triton's own TensorRT backend (scripts/build_triton_trt_backend.sh), carried in .gpu-triton/ where built
           [ -f .gpu-triton/backends/tensorrt/libtriton_tensorrt.so ] && export TRTKIT_TRITON_BACKENDS=$PWD/.gpu-triton/backends
           # SERVE_TESTS=0 leaves out the serve GPU tests (their time goes to benchmarks/serve_h200.py instead)
           if [ "${SERVE_TESTS:-1}" != 0 ]; then
             timeout ${SERVE_TESTS_TIMEOUT:-240} python3 -m pytest -m gpu -v -rs -p no:cacheprovider --timeout 200 --timeout-method=thread \
               tests/gpu/test_serve_gpu.py > "$W/serve-tests.log" 2>&1; echo "serve tests rc=$?"; tail -15 "$W/serve-tests.log"
           else echo "serve tests left out (SERVE_TESTS=0)"; fi
           mkdir -p "$W/serve"; timeout ${SERVE_TIMEOUT:-360} python3 benchmarks/serve_h200.py --out "$W/serve" --cache "$TRTKIT_GPU_CACHE" \
             --deadline-s $(( ${SERVE_TIMEOUT:-360} - 60 )) ${SERVE_ARGS:-} > "$W/serve.log" 2>&1; echo "serve rc=$?"; tail -30 "$W/serve.log" ;;
    seed_data) # the generated shapes set (calibration and scoring images, COCO val) and a 1280x720 video of shapes
               DATA=$TRTKIT_GPU_CACHE/shapes
               [ -f "$DATA/val.json" ] || python3 scripts/make_detection_data.py "$DATA" --train ${SEED_TRAIN:-256} --val ${SEED_VAL:-200} \
                 > "$W/seed-data.log" 2>&1; echo "data rc=$? $(ls "$DATA/val" 2>/dev/null | wc -l) val images"
               [ -f "$DATA/shapes.mp4" ] || python3 -c "import sys; sys.path.insert(0, 'samples/pipeline'); from pathlib import Path; \
                 import run; run.shapes_video(Path('$DATA/shapes.mp4'), ${SEED_FRAMES:-150}, size=(1280, 720), codec='libx264')" ;;
    seed_compare) # trtkit compare on exported seed models (COMPARE_MODELS, default yolov8n): FP32/FP16/INT8 at batch 1, 4, 8,
                  # scored on the shapes set (COMPARE_EVAL= leaves the score out: a random-weights model of 91 classes
                  # is refused by the shapes set's 8 categories); engines in the engine cache, so a call cut short resumes; then trtkit bench
                  # alone on every engine at batch 8 (the compare's figures against bench's)
                  S=$TRTKIT_GPU_CACHE/seed; DATA=$TRTKIT_GPU_CACHE/shapes; D=$W/compare; mkdir -p "$D"
                  for m in ${COMPARE_MODELS:-yolov8n}; do
                    timeout ${COMPARE_TIMEOUT:-540} trtkit compare "$S/$m.onnx" --precisions ${COMPARE_PRECISIONS:-fp32,fp16,int8} \
                      --batches 1,4,8 --calib "$DATA/train" --calib-max-samples 256 \
                      ${COMPARE_EVAL---eval detection --images $DATA/val --coco $DATA/val.json} \
                      --tactic-sources $TACTICS --cache-dir "$TRTKIT_GPU_CACHE/engines" \
                      --json "$D/compare-$m-h200.json" --markdown "$D/compare-$m.md" ${COMPARE_ARGS:-} > "$D/$m.log" 2>&1
                    echo "compare $m rc=$?"; tail -30 "$D/$m.log"
                    [ -f "$D/compare-$m-h200.json" ] && python3 - "$D/compare-$m-h200.json" <<'PY' 2>&1 | tee "$D/bench-alone-$m.txt"
import json, subprocess, sys
import onnx
result = json.load(open(sys.argv[1]))
graph = onnx.load(result["model"], load_external_data=False).graph
first = graph.input[0]
dims = [d.dim_value or 1 for d in first.type.tensor_type.shape.dim]
for e in result.get("engines", []):
    if not e.get("engine") or "static" in e["label"]:
        continue
    out = sys.argv[1] + "." + e["label"].replace(" ", "_") + ".bench.json"
    spec = first.name + ":" + "x".join(map(str, [8, *dims[1:]]))
    subprocess.run(["trtkit", "bench", e["engine"], "--shapes", spec, "--json", out], capture_output=True, timeout=120)
    try:
        b = json.load(open(out))
    except Exception as exc:
        print(e["label"], "bench failed:", exc); continue
    rows = [(r["mode"], r["mean_ms"], r["images_per_s"]) for r in result["rows"] if r.get("engine") == e["engine"] and r.get("batch") == 8]
    print(e["label"], "bench alone b8: mean_ms", b["latency_ms"]["mean"], "images/s", b["throughput"]["items_per_s"], "| compare:", rows)
PY
                  done ;;
    seed_models) # build (FP32 + SEED_PRECISIONS), parity and a stream of each exported seed model (scripts/seed_models_gpu.py);
                 # resumes from the results file kept in the cache
                 F=$TRTKIT_GPU_CACHE/seed-models.json; DATA=$TRTKIT_GPU_CACHE/shapes
                 timeout ${SEED_TIMEOUT:-560} python3 scripts/seed_models_gpu.py --models "$TRTKIT_GPU_CACHE/seed" --video "$DATA/shapes.mp4" \
                   --calib "$DATA/train" --precisions ${SEED_PRECISIONS:-fp32} --tactics $TACTICS --out "$F" ${SEED_ARGS:-} \
                   > "$W/seed-models.log" 2>&1; echo "seed_models rc=$?"; cp "$F" "$W/" 2>/dev/null; tail -25 "$W/seed-models.log" ;;
    timing_cache) # the default timing cache: a model's second build and a sibling's (benchmarks/timing_cache_h200.py)
                  S=$TRTKIT_GPU_CACHE/seed
                  timeout ${TIMING_TIMEOUT:-560} python3 benchmarks/timing_cache_h200.py --model "$S/${TIMING_MODEL:-yolov8n}.onnx" \
                    --sibling "$S/${TIMING_SIBLING:-yolov8s}.onnx" --tactics $TACTICS --out "$W" > "$W/timing-cache.log" 2>&1
                  echo "timing_cache rc=$?"; tail -30 "$W/timing-cache.log" ;;
    modelopt) # NVIDIA ModelOpt's ONNX PTQ against trtkit's own Q/DQ on the sample detector (benchmarks/int8_vs_modelopt_h200.py):
              # ModelOpt's wheels (scripts/modelopt_wheels.txt; carry .whl-modelopt) go to /tmp/site-modelopt for the torch
              # Python, which runs ModelOpt in a child process; trtkit builds, scores and times in this Python
              P=${MODELOPT_PYTHON:-/opt/torch/.venv/bin/python3}
              [ -d /tmp/site-modelopt/modelopt ] || $P -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
                --upgrade --target /tmp/site-modelopt .whl-modelopt/*.whl > "$W/modelopt-install.log" 2>&1
              echo "modelopt install rc=$? $(PYTHONPATH=/tmp/site-modelopt $P -c 'import modelopt.onnx.quantization as q, modelopt; print(modelopt.__version__)' 2>&1 | tail -1)"
              timeout ${MODELOPT_TIMEOUT:-560} python3 benchmarks/int8_vs_modelopt_h200.py --out "$W/modelopt" --cache "$TRTKIT_GPU_CACHE" \
                --modelopt-python "$P" --modelopt-path /tmp/site-modelopt --tactics $TACTICS --budget ${MODELOPT_BUDGET:-500} \
                ${MODELOPT_ARGS:-} > "$W/modelopt.log" 2>&1; echo "modelopt rc=$?"; tail -30 "$W/modelopt.log"
              cp /tmp/trtkit-detection/modelopt/*.log "$W/modelopt/" 2>/dev/null ;;
    live) # live streams (benchmarks/live_h200.py): 1080p30 H.264 publishers over RTMP to `trtkit run --listen --post
          # detection`, annotated RTMP out to receivers; LIVE_ENGINE (default: YOLOv8n FP16, built here from the exported
          # seed model if missing)
          E=${LIVE_ENGINE:-$TRTKIT_GPU_CACHE/seed/yolov8n.fp16.engine}
          [ -f "$E" ] || trtkit build "$TRTKIT_GPU_CACHE/seed/yolov8n.onnx" --fp16 --batch 1,4,8 --tactic-sources $TACTICS -o "$E" \
            > "$W/live-build.log" 2>&1 || { echo "live build rc=$?"; tail -5 "$W/live-build.log"; }
          timeout ${LIVE_TIMEOUT:-400} python3 benchmarks/live_h200.py --engine "$E" --out "$W/live" ${LIVE_ARGS:-} \
            > "$W/live.log" 2>&1; echo "live rc=$?"; tail -30 "$W/live.log" ;;
    *) echo "unknown step $step" ;;
  esac
done
tar -cf "$OUT/results.tar" -C "$W" .
(cd "$TRTKIT_GPU_CACHE" && find . -maxdepth 1 -type f -size -12M | tar -cf "$OUT/caches.tar" -T - 2>/dev/null)
ls -la "$OUT"
