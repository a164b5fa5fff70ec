#!/usr/bin/env bash
# plan --serve and preflight --method inference on the lent GPU machine, idle and then beside a process holding
# 100 GiB of GPU memory (so vLLM's start-up check at --gpu-memory-utilization 0.5 must be refused), plus the GPU
# tests: `OUT=dir bash benchmarks/device_serve_live.sh` after .whl/ is carried (see benchmarks/device_run.sh).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash benchmarks/device_run.sh setup compile gputests > $OUT/steps.txt 2>&1
export PYTHONPATH=/tmp/site:$PWD/src
W='vllm serve Qwen/Qwen3-8B --max-model-len 32768'
python3 -m sparkops preflight --method inference --workload "$W" --report $OUT/env-report.json --format lines > $OUT/preflight-idle.txt 2>&1; echo "rc=$?" >> $OUT/preflight-idle.txt
python3 -m sparkops plan --serve -w "$W" > $OUT/plan-idle.txt 2>&1; echo "rc=$?" >> $OUT/plan-idle.txt
python3 -c "import torch,time; x=torch.empty(100*2**30,dtype=torch.uint8,device='cuda'); x.fill_(1); torch.cuda.synchronize(); print('holding',flush=True); time.sleep(90)" > $OUT/holder.txt 2>&1 &
sleep 25
nvidia-smi --query-gpu=memory.used,memory.total --format=csv > $OUT/smi-held.txt
python3 -m sparkops plan --serve -w "$W --gpu-memory-utilization 0.5" > $OUT/plan-held.txt 2>&1; echo "rc=$?" >> $OUT/plan-held.txt
python3 -m sparkops plan --serve --json -w "$W --gpu-memory-utilization 0.5" > $OUT/plan-held.json 2>/dev/null; echo "rc=$?" > $OUT/plan-held-json-rc.txt
python3 -m sparkops preflight --method inference --workload "$W" --report $OUT/env-report-held.json --format lines > $OUT/preflight-held.txt 2>&1; echo "rc=$?" >> $OUT/preflight-held.txt
wait
tail -5 $OUT/steps.txt; tail -3 $OUT/plan-held.txt; tail -2 $OUT/preflight-held.txt
