"""A real snapshot: `spark-ops collect` on the device machine's NVIDIA H200 (driver 580.159.04,
torch 2.11.0+cu130 in a uv venv), replayed. It must judge as that machine did live."""

from conftest import load_facts_fixture
from sparkops import api
from sparkops.facts.reading import Unavailable, known


def test_recorded_h200_replays_as_a_generic_nvidia_host():
    facts = load_facts_fixture("h200_device_recorded")
    dev = facts.gpu.devices[0]
    assert facts.gpu.source == "nvml" and dev.name == "NVIDIA H200" and dev.capability == (9, 0)
    assert known(dev.memory_total_bytes) and not isinstance(dev.power_limit_w, Unavailable)
    rep = api.build_report(facts, facts_source="recorded")
    by = {f.gotcha: f for f in rep.findings}
    assert rep.platform == "nvidia" and rep.identity.unified_memory is False
    assert by["identity"].status.value == "info"
    assert by["G1"].status.value == "pass" and "cu130" in by["G1"].summary
    assert by["G7"].status.value == "info" and "not applicable" in by["G7"].summary
    assert rep.headroom_gb is not None and rep.headroom_gb > 100  # discrete: the device's free memory
    assert "700 W" in by["G4"].summary
