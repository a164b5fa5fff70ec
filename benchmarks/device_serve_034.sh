#!/usr/bin/env bash
# vLLM 0.33 vs 0.34 launch lines (docker image tags) on the lent GPU machine, idle and beside a process holding 100 GiB
# of GPU memory: preflight with the pasted docker line alone (no --method: the line says it serves), and plan --serve.
# 0.33 must be refused at its start-up check when held; 0.34's extensible KV cache has no such check and sizes its pool
# from what is free. Plus the GPU tests. `OUT=dir bash benchmarks/device_serve_034.sh` after .whl/ is carried.
# Every text output goes to $OUT/all.txt (the device returns a handful of files), the reports to env-report-*.json.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ALL=$OUT/all.txt
bash benchmarks/device_run.sh setup compile gputests > $OUT/steps.txt 2>&1
export PYTHONPATH=/tmp/site:$PWD/src
L='docker run --gpus all -p 8000:8000 vllm/vllm-openai:TAG --model Qwen/Qwen3-8B --max-model-len 32768'
run_pair() {  # $1: idle | held
  for tag in v0.33.0 v0.34.0; do
    W=${L/TAG/$tag}
    { echo "===== preflight $1 $tag: $W"
      python3 -m sparkops preflight --workload "$W" --report $OUT/env-report-$1-$tag.json --format lines 2>&1; echo "rc=$?"
      echo "===== plan --serve $1 $tag"
      python3 -m sparkops plan --serve -w "$W" 2>&1; echo "rc=$?"; } >> $ALL
  done
}
run_pair idle
python3 -c "import torch,time; x=torch.empty(100*2**30,dtype=torch.uint8,device='cuda'); x.fill_(1); torch.cuda.synchronize(); print('holding',flush=True); time.sleep(120)" > $OUT/holder.txt 2>&1 &
sleep 25
{ echo "===== nvidia-smi while held"; nvidia-smi --query-gpu=memory.used,memory.total --format=csv; } >> $ALL
run_pair held
wait
tail -5 $OUT/steps.txt; grep -E "^(=====|verdict|rc=)" $ALL
