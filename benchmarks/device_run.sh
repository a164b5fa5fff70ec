#!/usr/bin/env bash
# What this project runs on the lent GPU machine (an H200 with torch, transformers, peft preinstalled,
# no registry access), so the recorded results can be reproduced: `bash benchmarks/device_run.sh STEP...`
# with the wheels in .whl/ (tool dependencies + bitsandbytes) and $OUT the folder results go to.
#   setup        install .whl/* into /tmp/site (tool deps, bitsandbytes) for the device python3, byte-compiled
#                as pip does at install (the machine sets PYTHONDONTWRITEBYTECODE: nothing is compiled on import)
#   compile      byte-compile src/ and .carry-prev/src/ (what an installed checkout has; bench_cli's cold row
#                copies src/ without its __pycache__ and still measures the first run)
#   memory IDS   memory harness on the listed configuration ids (comma-separated) of CONFIGS
#   watch        spark-ops watch over a ~100 s matmul job, then thermal analyze of its log
#   gputests     pytest -m gpu
#   suite        benchmarks/suite.py (preflight timings, bandwidth probes, sampler cost)
#   fleet1       spark-ops fleet under torchrun, one rank, NCCL
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=$(command -v python3)
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
while [ $# -gt 0 ]; do
  step=$1; shift
  echo "=== $step $(date -u +%H:%M:%S)"
  case $step in
    setup) $PY -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl 2>&1 | grep -v "already exists" | tail -3 ;;
    compile) $PY -m compileall -q -j 0 src $( [ -d .carry-prev/src ] && echo .carry-prev/src ) | tail -3 ;;
    memory) ids=$1; shift
      timeout 560 $PY benchmarks/memory/harness.py --configs "${CONFIGS:-benchmarks/memory/configs.yaml}" \
        --out "$OUT/memory.jsonl" --timeout 200 --only "$ids" 2>&1 | tail -20 ;;
    watch) $PY -m sparkops watch --interval 0.5 --log "$OUT/watch.csv" --plot "$OUT/watch.png" \
        -- $PY benchmarks/gpu_job.py --seconds "${WATCH_S:-100}" > "$OUT/watch-output.txt" 2>&1
      echo "watch rc=$?"; tail -12 "$OUT/watch-output.txt"
      $PY -m sparkops thermal analyze "$OUT/watch.csv" --profile generic --json > "$OUT/watch-analyze.json"; echo "analyze rc=$?" ;;
    gputests) $PY -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tail -15 ;;
    suite) timeout 400 $PY benchmarks/suite.py --out "$OUT" 2>&1 | tail -40 ;;
    fleet1) (cd "$OUT" && NCCL_NVLS_ENABLE=0 timeout 240 torchrun --standalone --nproc-per-node 1 -m sparkops fleet \
        --backend nccl --offline --report "$OUT/fleet-report.json" > "$OUT/fleet.txt" 2> "$OUT/fleet.err"; echo "fleet rc=$?")
      cat "$OUT/fleet.txt" | tail -40; tail -5 "$OUT/fleet.err" ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
