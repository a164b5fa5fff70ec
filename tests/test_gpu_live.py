"""Live preflight on a real NVIDIA GPU (marked ``gpu``: skipped where no driver answers).

Run on the device machine (an H200 answers like a generic NVIDIA host: capability (9, 0),
discrete memory, 700 W). The target interpreter is ``python3`` on PATH, which must hold torch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu


def _has_torch(py: str) -> bool:
    return subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0


def test_live_preflight_judges_a_real_gpu_truthfully(tmp_path):
    py = shutil.which("python3") or sys.executable
    if not _has_torch(py):
        pytest.skip(f"{py} has no torch")
    rep = tmp_path / "env-report.json"
    p = subprocess.run([sys.executable, "-m", "sparkops", "preflight", "--python", py, "--offline",
                        "--config", str(tmp_path), "--report", str(rep)],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert p.returncode in (0, 1, 2), p.stderr
    data = json.loads(rep.read_text())
    findings = {f["gotcha"]: f for f in data["findings"]}
    ident = data["identity"]
    assert data["platform"] in ("nvidia", "dgx-spark")
    assert ident["gpu_name"] and ident["capability"] and ident["driver_version"]
    # torch in the target must see the same device NVML sees
    live = subprocess.run([py, "-c", "import torch;print(*torch.cuda.get_device_capability())"],
                          capture_output=True, text=True).stdout.split()
    assert [int(x) for x in live] == ident["capability"]
    if data["platform"] == "nvidia":
        assert findings["identity"]["status"] == "info"
        assert ident["unified_memory"] is False
        assert data["headroom_gb"] and data["headroom_gb"] > 1
    cuda = subprocess.run([py, "-c", "import torch;print(torch.version.cuda)"], capture_output=True,
                          text=True).stdout.strip()
    drv_major = int(ident["cuda_driver_version"].split(".")[0])
    if cuda and cuda != "None" and int(cuda.split(".")[0]) <= drv_major:
        assert findings["G1"]["status"] == "pass", findings["G1"]
    # real NVML readings: temperature, power and clocks appear in G4's reading
    assert findings["G4"]["status"] in ("info", "warn"), findings["G4"]
    assert "°C" in findings["G4"]["summary"] and " W" in findings["G4"]["summary"]


def test_collect_then_replay_gives_the_same_verdict(tmp_path):
    py = shutil.which("python3") or sys.executable
    snap, r1, r2 = tmp_path / "f.json", tmp_path / "r1.json", tmp_path / "r2.json"
    base = [sys.executable, "-m", "sparkops"]
    common = ["--python", py, "--offline", "--config", str(tmp_path)]
    assert subprocess.run([*base, "collect", "-o", str(snap), *common], timeout=300).returncode == 0
    a = subprocess.run([*base, "preflight", "--facts", str(snap), "--report", str(r1)], capture_output=True)
    b = subprocess.run([*base, "preflight", "--facts", str(snap), "--report", str(r2)], capture_output=True)
    assert a.returncode == b.returncode
    assert json.loads(r1.read_text())["checks"] == json.loads(r2.read_text())["checks"]
