"""Host probe: os-release/dgx-release parsing, CPU naming, container markers, /dev/nvidia* access."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from sparkops.checks.container import classify as judged
from sparkops.facts.model import HostFacts
from sparkops.facts.reading import Unavailable, Why, known
from sparkops.probes import CollectOptions, host
from sparkops.probes.host import cgroup_runtime_names, gather, overlay_root, parse_cpuinfo, parse_os_release

RAW = FIXTURES / "raw"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
UNAME = SimpleNamespace(machine="x86_64", release="0.0-test", node="should-not-be-used")


def gb10_cpuinfo() -> str:
    """A GB10 /proc/cpuinfo, CONSTRUCTED from the recorded facts (gb10-readings.md §4.3): arm64 has
    no "model name"; parts 0xd85 (Cortex-X925, the fast cores 5-9 and 15-19) and 0xd87
    (Cortex-A725), r0p1. Field list of the arm64 kernel's show_cpuinfo."""
    blocks = []
    for cpu in range(20):
        part = "0xd85" if cpu % 10 >= 5 else "0xd87"
        blocks.append(
            f"processor\t: {cpu}\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 "
            "atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve\n"
            f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: {part}\n"
            "CPU revision\t: 1\n"
        )
    return "\n".join(blocks)


def _write(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


@pytest.fixture
def spark_root(tmp_path: Path) -> Path:
    """A fake / of a bare DGX Spark host (DGX OS on Ubuntu 24.04.4, kernel from §4.4)."""
    r = tmp_path
    shutil.copy(RAW / "os_release" / "ubuntu_24.04.4_os-release", _write(r, "etc/os-release", ""))
    shutil.copy(RAW / "os_release" / "dgx-release_dgxspark03", _write(r, "etc/dgx-release", ""))
    shutil.copy(RAW / "os_release" / "dmi_product_name_dgx_spark", _write(r, "sys/class/dmi/id/product_name", ""))
    _write(r, "proc/cpuinfo", gb10_cpuinfo())
    _write(r, "proc/sys/kernel/arch", "aarch64\n")
    _write(r, "proc/sys/kernel/osrelease", "6.17.0-1021-nvidia\n")
    _write(r, "proc/sys/kernel/hostname", "thinkstationpgx-00b4\n")
    shutil.copy(RAW / "cgroup" / "v2_host_session.txt", _write(r, "proc/1/cgroup", ""))
    for node in ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"):
        _write(r, f"dev/{node}", "")
    (r / "dev" / "nvidia-caps").mkdir()
    _write(r, "dev/null", "")
    return r


# --------------------------------------------------------------------------- parsers
def test_os_release_verbatim_ubuntu():
    d = parse_os_release((RAW / "os_release" / "ubuntu_24.04.4_os-release").read_text())
    assert d["PRETTY_NAME"] == "Ubuntu 24.04.4 LTS"
    assert d["VERSION"] == "24.04.4 LTS (Noble Numbat)"
    assert d["VERSION_CODENAME"] == "noble"
    assert d["ID_LIKE"] == "debian"


def test_dgx_release_verbatim_quotes_and_ota():
    d = parse_os_release((RAW / "os_release" / "dgx-release_dgxspark03").read_text())
    assert d["DGX_NAME"] == "DGX Spark"
    assert d["DGX_PRETTY_NAME"] == "NVIDIA DGX Spark"
    assert d["DGX_OTA_DATE"] == "Thu Jun 18 17:40:28 EDT 2026"


def test_dgx_release_unquoted_oem_value_and_stacked_ota_last_wins():
    d = parse_os_release((RAW / "os_release" / "dgx-release_hp_stacked_ota").read_text())
    assert d["DGX_PLATFORM"] == "HP ZGX Nano G1n AI Station"
    assert d["DGX_OTA_VERSION"] == "7.4.0"


def test_os_release_escapes_and_junk_lines():
    d = parse_os_release('A="say \\"hi\\" \\$HOME"\n# comment\nnot a line\n9BAD=x\nB=\'single\'\n')
    assert d == {"A": 'say "hi" $HOME', "B": "single"}


def test_cpuinfo_gb10_names_both_core_types():
    model, count = parse_cpuinfo(gb10_cpuinfo())
    assert count == 20
    assert model == "10x Cortex-A725 + 10x Cortex-X925"


def test_cpuinfo_x86_model_name():
    text = "processor\t: 0\nmodel name\t: AMD EPYC 9654\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 9654\n"
    assert parse_cpuinfo(text) == ("AMD EPYC 9654", 2)


def test_cpuinfo_unknown_arm_part_is_named_not_dropped():
    model, _ = parse_cpuinfo("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xfff\n")
    assert model == "Arm part 0xfff"


def test_cgroup_runtime_names_v1_docker_and_v2_hidden():
    assert cgroup_runtime_names((RAW / "cgroup" / "v1_docker_self.txt").read_text()) == ["docker", "containerd"]
    assert cgroup_runtime_names((RAW / "cgroup" / "v2_container_self.txt").read_text()) == []


def test_overlay_root_detection():
    mi = ("1203 1109 0:312 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/x\n"
          "1204 1203 0:315 / /proc rw,nosuid - proc proc rw\n")
    assert overlay_root(mi)
    assert not overlay_root("29 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=500))
def test_parsers_never_crash(text):
    assert isinstance(parse_os_release(text), dict)
    model, count = parse_cpuinfo(text)
    assert model is None or isinstance(model, str)
    assert count >= 0
    assert isinstance(cgroup_runtime_names(text), list)
    assert overlay_root(text) in (True, False)


# --------------------------------------------------------------------------- gather on a fake GB10
def test_bare_spark_host(spark_root):
    f = gather({"PATH": "/usr/bin", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123456789"}, spark_root, UNAME)
    assert f.arch == "aarch64"
    assert f.kernel == "6.17.0-1021-nvidia"
    assert f.hostname == "thinkstationpgx-00b4"
    assert f.dmi_product == "NVIDIA_DGX_Spark"
    assert f.cpu_model == "10x Cortex-A725 + 10x Cortex-X925"
    assert f.cpu_count == 20
    assert f.os_release["VERSION_ID"] == "24.04"
    assert f.os_release["DGX_NAME"] == "DGX Spark"
    assert f.os_release["DGX_OTA_VERSION"] == "7.5.0"
    assert "DGX_SERIAL_NUMBER" not in f.os_release  # a serial identifies the box: never stored
    assert "HF_TOKEN" not in f.env and f.env["PATH"] == "/usr/bin"
    # bare host: no marker, and that is "unknown", not "none"
    assert f.container.markers == []
    kind = judged(f.container).image_kind  # the container kind is the checks' (checks/container.py)
    assert isinstance(kind, Unavailable) and kind.unavailable == Why.not_found
    assert "cgroup v2" in kind.detail
    assert set(f.dev_nvidia) == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                 "/dev/nvidia-modeset"}
    assert f.dev_nvidia["/dev/nvidia0"] == "rw"
    HostFacts.model_validate(f.model_dump())  # survives a JSON round trip


def test_fake_root_never_borrows_the_live_uname(tmp_path):
    f = gather({}, tmp_path, UNAME)
    assert not known(f.kernel) and not known(f.arch)
    assert f.hostname == ""
    assert not known(f.dmi_product) and not known(f.cpu_model) and not known(f.cpu_count)
    assert isinstance(f.dev_nvidia, Unavailable) and f.dev_nvidia.unavailable == Why.not_found


def test_ngc_pytorch_container(spark_root):
    _write(spark_root, ".dockerenv", "")
    shutil.copy(RAW / "cgroup" / "v2_container_self.txt", spark_root / "proc/1/cgroup")
    env = {"NVIDIA_PYTORCH_VERSION": "25.09", "NVIDIA_PRODUCT_NAME": "PyTorch", "NVIDIA_BUILD_ID": "192145342",
           "PYTORCH_VERSION": "2.9.0a0+50eac81", "NVIDIA_VISIBLE_DEVICES": "all",
           "NVIDIA_DRIVER_CAPABILITIES": "compute,utility", "CUDA_VERSION": "13.0.1.012",
           "NVIDIA_API_KEY": "nvapi-should-never-appear-anywhere-0123456789"}
    raw = gather(env, spark_root, UNAME).container
    c = judged(raw)
    assert c.image_kind == "ngc-pytorch"
    assert c.image_hint == "nvcr.io/nvidia/pytorch:25.09-py3"
    assert "/.dockerenv" in c.markers
    assert "env:NVIDIA_PYTORCH_VERSION=25.09" in c.markers
    assert "env:NVIDIA_VISIBLE_DEVICES" in c.markers
    assert raw.nvidia_env["NVIDIA_PYTORCH_VERSION"] == "25.09"
    assert raw.nvidia_env["NVIDIA_API_KEY"] == "***"
    # raw: what was read; the corroborated NGC version marker is the judgment's (checks/container.py)
    assert raw.markers == ["/.dockerenv", "env:NVIDIA_VISIBLE_DEVICES", "env:NVIDIA_DRIVER_CAPABILITIES"]


def test_v1_docker_cgroup_without_image_is_other(spark_root):
    shutil.copy(RAW / "cgroup" / "v1_docker_self.txt", spark_root / "proc/1/cgroup")
    c = judged(gather({}, spark_root, UNAME).container)
    assert c.markers == ["cgroup:docker", "cgroup:containerd"]
    assert c.image_kind == "other"


def test_podman_containerenv_names_the_unsloth_image(spark_root):
    shutil.copy(RAW / "os_release" / "containerenv_podman", _write(spark_root, "run/.containerenv", ""))
    c = judged(gather({"container": "podman"}, spark_root, UNAME).container)
    assert c.markers == ["/run/.containerenv", "env:container=podman"]
    assert c.image_kind == "unsloth"
    assert c.image_hint == "docker.io/unsloth/unsloth:dgxspark-latest"


def test_unsloth_workspace_on_ngc_base(spark_root):
    _write(spark_root, ".dockerenv", "")
    (spark_root / "workspace" / "unsloth").mkdir(parents=True)
    c = judged(gather({"NVIDIA_PYTORCH_VERSION": "25.09", "NVIDIA_BUILD_ID": "1"}, spark_root, UNAME).container)
    assert c.image_kind == "unsloth"
    assert "/workspace/unsloth" in c.image_hint and "nvcr.io/nvidia/pytorch:25.09-py3" in c.image_hint


def test_unsloth_env_on_a_bare_host_is_not_a_container(spark_root):
    c = judged(gather({"UNSLOTH_COMPILE_DISABLE": "1"}, spark_root, UNAME).container)
    assert not known(c.image_kind)


def test_hand_exported_ngc_version_is_not_a_container(spark_root):
    # HPC job scripts `export NVIDIA_PYTORCH_VERSION=24.03` to please installers (seen in the wild)
    raw = gather({"NVIDIA_PYTORCH_VERSION": "24.03"}, spark_root, UNAME).container
    c = judged(raw)
    assert c.markers == []
    assert isinstance(c.image_kind, Unavailable)
    assert "exported by hand" in c.image_kind.detail
    assert raw.nvidia_env == {"NVIDIA_PYTORCH_VERSION": "24.03"}


def test_other_ngc_product_is_guessed_and_labelled(spark_root):
    _write(spark_root, ".dockerenv", "")
    c = judged(gather({"NVIDIA_TRITON_SERVER_VERSION": "25.11", "NVIDIA_BUILD_ID": "7"}, spark_root, UNAME).container)
    assert c.image_kind == "ngc-other"
    assert "guessed" in c.image_hint and "25.11" in c.image_hint


def test_overlay_root_alone_marks_a_container(spark_root):
    _write(spark_root, "proc/1/mountinfo",
           "1203 1109 0:312 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/x\n")
    c = judged(gather({}, spark_root, UNAME).container)
    assert c.markers == ["mountinfo:overlay-root"] and c.image_kind == "other"


@pytest.mark.skipif(IS_ROOT, reason="root bypasses file modes, so access cannot be denied here")
def test_dev_nvidia_read_only_and_no_access(spark_root):
    (spark_root / "dev" / "nvidia0").chmod(0o444)
    (spark_root / "dev" / "nvidiactl").chmod(0o000)
    try:
        d = gather({}, spark_root, UNAME).dev_nvidia
        assert d["/dev/nvidia0"] == "r"
        assert d["/dev/nvidiactl"] == "none"
    finally:
        (spark_root / "dev" / "nvidiactl").chmod(0o644)


def test_dev_nvidia_access_mapping(spark_root, monkeypatch):
    """The mapping itself, whoever runs the test (root passes every os.access check)."""
    rights = {"nvidia0": {os.R_OK}, "nvidiactl": set(), "nvidia-uvm": {os.R_OK, os.W_OK}}

    def fake_access(path, mode):
        return mode in rights.get(Path(path).name, {os.R_OK, os.W_OK})

    monkeypatch.setattr(host.os, "access", fake_access)
    d = gather({}, spark_root, UNAME).dev_nvidia
    assert (d["/dev/nvidia0"], d["/dev/nvidiactl"], d["/dev/nvidia-uvm"]) == ("r", "none", "rw")


def test_dev_without_nvidia_nodes(spark_root):
    for p in (spark_root / "dev").glob("nvidia*"):
        p.rmdir() if p.is_dir() else p.unlink()
    d = gather({}, spark_root, UNAME).dev_nvidia
    assert isinstance(d, Unavailable) and d.unavailable == Why.not_found
    assert "/dev/nvidia" in d.detail


# --------------------------------------------------------------------------- runner entry points
def test_collect_reads_the_root_from_opts_env(spark_root):
    f = host.collect(CollectOptions(env={"SPARKOPS_ROOT": str(spark_root), "WORLD_SIZE": "2"}))
    assert f.dmi_product == "NVIDIA_DGX_Spark"
    assert f.env["WORLD_SIZE"] == "2"


def test_live_host_does_not_raise():
    f = host.collect(CollectOptions(env={"PATH": os.environ.get("PATH", "")}))
    arch_file = Path("/proc/sys/kernel/arch")
    assert f.arch == (arch_file.read_text().strip() if arch_file.exists() else platform.machine())
    assert known(f.kernel)
    HostFacts.model_validate(f.model_dump(mode="json"))


def test_unavailable_section_says_why():
    f = host.unavailable(Why.timeout, "probe still running")
    assert isinstance(f.arch, Unavailable) and f.arch.unavailable == Why.timeout
    assert isinstance(judged(f.container).image_kind, Unavailable)
    assert f.container.markers_read.unavailable == Why.timeout


def test_ngc_image_with_pip_installed_unsloth_is_ngc_not_the_unsloth_container(tmp_path):
    """Issue 15: `pip install unsloth` inside nvcr.io/nvidia/pytorch is NGC's stack with Unsloth on top."""
    from sparkops.probes.host import _container

    (tmp_path / "usr/local/lib/python3.12/dist-packages/unsloth").mkdir(parents=True)
    (tmp_path / ".dockerenv").write_text("")
    facts = judged(_container({"NVIDIA_PYTORCH_VERSION": "25.09", "NVIDIA_BUILD_ID": "1"}, tmp_path))
    assert facts.image_kind == "ngc-pytorch" and "unsloth" not in facts.image_hint.lower()
