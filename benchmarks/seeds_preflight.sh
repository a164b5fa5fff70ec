#!/usr/bin/env bash
# Reconstructs the seed article's preflight.sh logic, as the benchmark baseline for `spark-ops
# preflight` (benchmarks/suite.py times it beside the tool). It is NOT part of the tool and judges
# only five gotchas, each the way the seed did: G1 reads torch.version.cuda through a python import,
# G3 `free -g`, G4 one nvidia-smi query, G7 the capability through a second, separate python torch
# import, G9 the container markers. Usage: PYTHON=/path/to/python benchmarks/seeds_preflight.sh
PY="${PYTHON:-python3}"

# G1: CUDA 12/13 ABI (python import #1)
cuda=$("$PY" -c "import torch; print(torch.version.cuda)" 2>/dev/null)
case "$cuda" in
  13.*) echo "G1 PASS: torch built for CUDA $cuda" ;;
  "") echo "G1 FAIL: torch did not import" ;;
  *) echo "G1 FAIL: torch built for CUDA $cuda, Spark runs CUDA 13" ;;
esac

# G3: unified memory headroom
avail=$(free -g 2>/dev/null | awk '/^Mem:/ {print $7}')
echo "G3 INFO: ${avail:-?} GB available"

# G4: thermal / power snapshot
if reading=$(nvidia-smi --query-gpu=temperature.gpu,power.draw --format=csv,noheader 2>/dev/null); then
  echo "G4 INFO: $reading"
else
  echo "G4 SKIP: nvidia-smi failed"
fi

# G7: NVFP4 needs SM121 (python import #2)
cap=$("$PY" -c "import torch; print(torch.cuda.get_device_capability())" 2>/dev/null)
if [ "$cap" = "(12, 1)" ]; then echo "G7 PASS: capability $cap"; else echo "G7 WARN: capability ${cap:-unknown}"; fi

# G9: container-first
if [ -f /.dockerenv ] || [ -f /run/.containerenv ] || grep -qE 'docker|containerd|kubepods|lxc' /proc/1/cgroup 2>/dev/null; then
  echo "G9 PASS: inside a container"
else
  echo "G9 WARN: bare metal / bare pip"
fi
