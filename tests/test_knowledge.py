"""Knowledge data: profiles match the names NVML really prints, and the files load safely."""

import pytest

from sparkops.knowledge import load


@pytest.mark.parametrize("name,key", [
    ("NVIDIA GB10", "gb10"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA L40", "l40"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA A10", "a10"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000-blackwell"),
    ("NVIDIA B200", "b200"),
])
def test_profile_matching(name, key):
    p = load().profile_for(name)
    assert p is not None and p.key == key


@pytest.mark.parametrize("name", ["NVIDIA GB200", "Tesla T4", "NVIDIA GeForce GTX 1650"])
def test_unknown_models_get_no_profile(name):
    assert load().profile_for(name) is None


def test_every_profile_has_a_spec_bandwidth_and_a_matching_pattern():
    kb = load()
    for p in kb.profiles:
        assert p.spec_bandwidth_gbs, p.key
        assert kb.profile_for(f"NVIDIA {p.name_patterns[0]}").key == p.key, p.key
