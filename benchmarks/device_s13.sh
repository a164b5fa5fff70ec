#!/usr/bin/env bash
# Session 13 on the lent GPU machine: the GPU tests; the README's preflight as a user runs it from the checkout (the
# tool's deps from .whl/, no registry there); plan --serve for a chat server and an embedding server on this discrete
# GPU (no unified-memory terms may apply); diagnose --live on a CUDA-12-library report and on a missing-kernel report
# (the G1 gate: the first is G1, the second is not, and the live facts of a cu13 torch confirm neither).
# `OUT=dir bash benchmarks/device_s13.sh` after .whl/ is carried. Text goes to $OUT/all.txt.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ALL=$OUT/all.txt
bash benchmarks/device_run.sh setup compile gputests > "$OUT/steps.txt" 2>&1
export PYTHONPATH=/tmp/site:$PWD/src
PY=$(command -v python3)
{ echo "===== preflight (README command, from the checkout)"
  $PY -m sparkops preflight --python "$PY" --report "$OUT/env-report.json" --format lines 2>&1; echo "rc=$?"
  for W in "vllm serve Qwen/Qwen3-8B --max-model-len 32768 --gpu-memory-utilization 0.5" \
           "vllm serve Qwen/Qwen3-8B --runner pooling --max-model-len 4096 --gpu-memory-utilization 0.2 --enforce-eager"; do
    echo "===== plan --serve: $W"; $PY -m sparkops plan --serve -w "$W" 2>&1; echo "rc=$?"
  done
  printf 'ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n' > /tmp/g1.txt
  printf 'RuntimeError: CUDA error: no kernel image is available for execution on the device\n' > /tmp/gap.txt
  for f in /tmp/g1.txt /tmp/gap.txt; do
    echo "===== diagnose --live $f"; $PY -m sparkops diagnose --live "$f" 2>&1; echo "rc=$?"
  done; } >> "$ALL"
tail -8 "$OUT/steps.txt"; grep -E "^(=====|verdict|rc=|FITS|TIGHT|DOES|G1|none|no finding)" "$ALL" | head -40
