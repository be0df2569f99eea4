#!/usr/bin/env bash
# Chains of scripts/gpu_session.sh steps in the background: the GPU host keeps its processes between calls while it
# stays warm, so one call starts the work and later calls collect it (no step is cut at a call's time limit).
# On the GPU host, from the checkout, once the bundle's parts are copied:
#   bash scripts/gpu_background.sh NAME 'session env ptests' "SEED_ARGS='--jobs 1' session seed_models" ...
#       one chain, NAME: its commands in turn, each logged to /root/run/NAME-<i>.log; `session STEP...` runs
#       gpu_session.sh's steps through the bundle (settings before it are its environment); `wait_for OTHER-<i>`
#       waits for another chain's command i
#   bash scripts/gpu_background.sh --poll SECONDS
#       waits (at most SECONDS) until no chain runs, prints the logs' tails and puts results.tar (gpu_session.sh's
#       results so far), logs.tar and cache-json.tar (the cache's JSON files) in $OUT
set -u
R=/root/run; mkdir -p "$R/out"
cd "$(dirname "$0")/.."
if [ "${1:-}" = --poll ]; then
  t=0; while [ $t -lt "${2:-500}" ] && ls "$R"/*.running >/dev/null 2>&1; do sleep 10; t=$((t+10)); done
  date; ls "$R"; for f in "$R"/*.log; do echo "##### $f"; tail -"${TAILN:-25}" "$f"; done
  tar -cf "$OUT/results.tar" -C /tmp/trtkit-results . 2>/dev/null
  tar -cf "$OUT/logs.tar" -C "$R" --exclude out . 2>/dev/null
  (cd "${TRTKIT_GPU_CACHE:-/root/trtkit-cache}" 2>/dev/null && find . -maxdepth 2 -type f -name '*.json' -size -4M \
    | tar -cf "$OUT/cache-json.tar" -T - 2>/dev/null)
  ls -la "$OUT"; exit 0
fi
name=$1; shift
bash .gpu/bin/gpu-run true || exit 3  # the bundle is unpacked once, before chains run side by side
{
  echo "cd $PWD"
  echo "session() { OUT=$R/out bash .gpu/bin/gpu-run bash scripts/gpu_session.sh \"\$@\"; }"
  echo "wait_for() { while [ ! -e $R/\$1.done ]; do sleep 5; done; }"
  i=0; for command in "$@"; do i=$((i+1)); echo "$command > $R/$name-$i.log 2>&1; touch $R/$name-$i.done"; done
  echo "rm -f $R/$name.running"
} > "$R/$name.sh"
touch "$R/$name.running"
nohup setsid bash "$R/$name.sh" > /dev/null 2>&1 &
echo "chain $name started: $# command(s), logs $R/$name-*.log"
