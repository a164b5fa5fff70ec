"""Replayable machine snapshots for the checks, built with the Facts models.

Every number and string comes from the public GB10 readings (shared/reference/gb10-readings.md)
or the H200 measurements in shared/spec/platforms.md; the sections those sources do not show are
filled in consistently with them (e.g. a full /proc/meminfo whose free/available/buff-cache sums
match a recorded ``free`` line). Run ``python tests/build_fixtures.py`` to rewrite
``tests/fixtures/facts/*.json``; ``tests/checks/test_replay.py`` fails if the committed JSON and
this generator drift apart.

Also the small helpers the check tests share: :func:`patch` (change a snapshot by dotted path) and
:func:`run_check` (one check, exceptions not swallowed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sparkops.checks import CHECKS, context
from sparkops.core.findings import Finding
from sparkops.facts.model import (
    V1_ARGV_LOST,
    CgroupMemFacts,
    ConfigHit,
    ConfigScanFacts,
    ContainerFacts,
    CudaLibFacts,
    ExtensionNeeds,
    Facts,
    GpuDevice,
    GpuFacts,
    GpuProcess,
    HostFacts,
    HostProcess,
    MemoryFacts,
    PlaybookIssue,
    PlaybookIssuesFacts,
    ProbeRecord,
    ProcessFacts,
    PsiFacts,
    PythonEnvFacts,
    TargetEnvFacts,
    TorchLive,
    TorchStatic,
    V1ContainerClass,
    V1ProcessClass,
)
from sparkops.facts.reading import Why, missing
from sparkops.facts.workload import Workload
from sparkops.knowledge import load

V1_LOST = missing(Why.not_collected, V1_ARGV_LOST)

FACTS_DIR = Path(__file__).parent / "fixtures" / "facts"
KIB = 1024
MIB = 1024**2
UTC = timezone.utc  # noqa: UP017 (py3.10 target)

COLLECTED = datetime(2026, 8, 26, 9, 30, 0, tzinfo=UTC)

# GB10 sysfs/NVML shapes (gb10-readings §1-§3, §5)
GB10_NAME = "NVIDIA GB10"
GB10_BUS = "0000000F:01:00.0"
NVML_MEM_NS = "nvmlDeviceGetMemoryInfo / _v2: NVML_ERROR_NOT_SUPPORTED"
# gb10-readings §2.3, verbatim counters (µs) from `nvidia-smi -q -d PERFORMANCE`, driver 580.95.05
GB10_COUNTERS = {"sw_power_cap": 50284264713, "sync_boost": 0, "sw_thermal": 0, "hw_thermal": 0, "hw_power_brake": 0}
# torch 2.11.0+cu130 on GB10 (gb10-readings §5.1, §5.2)
CU130_ARCHS = ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120"]
CAP_WARNING = ("Found GPU0 NVIDIA GB10 which is of cuda capability 12.1. Minimum and Maximum cuda capability "
               "supported by this version of PyTorch is (8.0) - (12.0)")
NGC_2509_TORCH = "2.9.0a0+50eac811a6.nv25.09"

# Open issues of NVIDIA/dgx-spark-playbooks as listed on 2026-08-26 (titles as filed upstream)
PLAYBOOK_ISSUES = [
    PlaybookIssue(number=109, title="nvidia/vllm is wrong missing Ray", updated_at="2026-08-24T18:02:11Z"),
    PlaybookIssue(number=102, title="NCCL playbook misses steps to reach full 200 Gbps bandwidth; 16G test "
                  "causes system freeze", updated_at="2026-08-17T21:40:05Z"),
    PlaybookIssue(number=46, title="The Link to NVIDIA Sync setup guide is broken.", updated_at="2026-01-07T03:12:44Z"),
    PlaybookIssue(number=25, title="Please evaluate following configuration for connect-two-sparks playbook",
                  updated_at="2025-11-19T14:55:30Z"),
    PlaybookIssue(number=7, title='Error in "NCCL for Two Sparks"', updated_at="2025-12-15T17:21:09Z"),
]


def meminfo(**kb: int) -> dict[str, int]:
    """/proc/meminfo lines given in kB -> the bytes dict the probe stores."""
    return {k: v * KIB for k, v in kb.items()}


def _probes(gpu_source: str = "nvml", **overrides: ProbeRecord) -> dict[str, ProbeRecord]:
    durations = {"target": 6.8, "gpu": 0.62, "host": 0.05, "memory": 0.01, "cuda_libs": 0.21,
                 "processes": 0.34, "configs": 0.09, "playbooks": 0.71}
    out = {n: ProbeRecord(name=n, ok=True, duration_s=d, source=gpu_source if n == "gpu" else "")
           for n, d in durations.items()}
    out.update(overrides)
    return out


def _gb10_device(**kw: Any) -> GpuDevice:
    base: dict[str, Any] = dict(
        index=0, name=GB10_NAME, pci_bus_id=GB10_BUS, capability=(12, 1), multiprocessor_count=48,
        memory_total_bytes=missing(Why.not_supported, NVML_MEM_NS),
        memory_used_bytes=missing(Why.not_supported, NVML_MEM_NS),
        memory_free_bytes=missing(Why.not_supported, NVML_MEM_NS),
        power_draw_w=10.0, power_limit_w=missing(Why.not_supported, "nvmlDeviceGetEnforcedPowerLimit: Not Supported"),
        temperature_c=42.0, sm_clock_mhz=2522.0, sm_clock_max_mhz=3003.0, utilization_pct=0.0, pstate="P0",
        clock_event_reasons=0x0, violation_us=dict(GB10_COUNTERS), violation_us_end=dict(GB10_COUNTERS),
        violation_window_s=0.5,
        processes=[GpuProcess(pid=329657, name="/usr/lib/xorg/Xorg", kind="graphics", used_memory_bytes=43 * MIB),
                   GpuProcess(pid=329691, name="/usr/bin/gnome-shell", kind="graphics", used_memory_bytes=16 * MIB)],
    )
    base.update(kw)
    return GpuDevice(**base)


def _gb10_gpu(driver: str = "580.159.03", **dev: Any) -> GpuFacts:
    return GpuFacts(source="nvml", driver_version=driver, cuda_driver_version="13.0", devices=[_gb10_device(**dev)])


def _gb10_host(hostname: str, container: ContainerFacts, env: dict[str, str], kernel: str = "6.17.0-1014-nvidia") -> HostFacts:
    return HostFacts(
        arch="aarch64", kernel=kernel,
        os_release={"NAME": "Ubuntu", "VERSION_ID": "24.04", "PRETTY_NAME": "Ubuntu 24.04.4 LTS",
                    "DGX_NAME": "DGX Spark", "DGX_PRETTY_NAME": "NVIDIA DGX Spark", "DGX_SWBUILD_VERSION": "7.2.3",
                    "DGX_OTA_VERSION": "7.5.0"},
        dmi_product="NVIDIA_DGX_Spark", cpu_model="Cortex-X925", cpu_count=20, hostname=hostname,
        container=container, env=env,
        dev_nvidia={"/dev/nvidia0": "rw", "/dev/nvidiactl": "rw", "/dev/nvidia-uvm": "rw"},
    )


def _host_cuda_libs() -> CudaLibFacts:
    """DGX OS host: CUDA 13 only (gb10-readings §4.6; no libcudart.so.12 exists on the host)."""
    return CudaLibFacts(
        ldconfig={"libcudart.so.13": ["/usr/local/cuda/targets/sbsa-linux/lib/libcudart.so.13"],
                  "libcudart.so": ["/usr/local/cuda/targets/sbsa-linux/lib/libcudart.so"],
                  "libcuda.so.1": ["/lib/aarch64-linux-gnu/libcuda.so.1"]},
        cudart13_load=True, cudart_runtime_version=13000, cuobjdump="/usr/local/cuda/bin/cuobjdump",
    )


def v1_container(markers: list[str], image_kind: Any = None, image_hint: str = "", **raw: Any) -> ContainerFacts:
    """A container as a schema-1 tool recorded it (the committed fixtures are schema 1): its markers and
    variables, and the kind and image it judged at collect time."""
    judged = V1ContainerClass(image_hint=image_hint, **({"image_kind": image_kind} if image_kind else {}))
    return ContainerFacts(markers=markers, v1_class=judged, **raw)


def _ngc_container(tag: str = "25.09") -> ContainerFacts:
    return v1_container(markers=["/.dockerenv", f"env:NVIDIA_PYTORCH_VERSION={tag}"], image_kind="ngc-pytorch",
                          image_hint=f"NVIDIA_PYTORCH_VERSION={tag}",
                          nvidia_env={"NVIDIA_PYTORCH_VERSION": tag, "NVIDIA_VISIBLE_DEVICES": "all",
                                      "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"})


def _live(version: str, cuda: str | None, arch_list: list[str], mem: dict[str, int] | None = None, **kw: Any) -> TorchLive:
    base: dict[str, Any] = dict(
        import_ok=True, duration_s=6.4, import_duration_s=4.9, stage="done", version=version, cuda=cuda,
        cuda_available=True, device_count=1, device_name=GB10_NAME, capability=(12, 1), arch_list=arch_list,
        flash_sdp_enabled=True, mem_efficient_sdp_enabled=True, math_sdp_enabled=True,
        warnings=[CAP_WARNING] if arch_list and arch_list[-1] == "sm_120" else [],
    )
    if mem is not None:
        base["mem_get_info_bytes"] = (mem["MemFree"], mem["MemTotal"])
        base["total_memory_bytes"] = mem["MemTotal"]
    base.update(kw)
    return TorchLive(**base)


def _ngc_target(dists: dict[str, str], mem: dict[str, int], **live: Any) -> TargetEnvFacts:
    torch = TorchStatic(version=NGC_2509_TORCH, cuda="13.0", local_tag="50eac811a6.nv25.09",
                        location="/usr/local/lib/python3.12/dist-packages/torch", git_version="50eac811a68e63e96ad56c11c983bfe298a0bb8a")
    return TargetEnvFacts(
        python="/usr/bin/python", chosen_because="python3 on PATH", python_version="3.12.3",
        env=PythonEnvFacts(kind="system", prefix="/usr", base_prefix="/usr",
                           site_packages=["/usr/local/lib/python3.12/dist-packages"]),
        distributions={"torch": NGC_2509_TORCH, **dists}, torch=torch,
        extensions=[ExtensionNeeds(package="flash-attn", file="flash_attn_2_cuda.cpython-312-aarch64-linux-gnu.so",
                                   needed=["libc10.so", "libtorch.so", "libtorch_cuda.so", "libcudart.so.13"])],
        live=_live(NGC_2509_TORCH, "13.0", ["sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120"],
                   mem, flash_attn_import=True, **live),
    )


# the stack-matrix combination on top of NGC 25.09 (shared/spec/stack-matrix.md)
MATRIX_DISTS = {"transformers": "5.13.1", "peft": "0.19.1", "trl": "1.8.0", "datasets": "4.3.0", "torchao": "0.17.0",
                "bitsandbytes": "0.49.2", "hf-transfer": "0.1.9", "huggingface-hub": "1.24.0", "accelerate": "1.11.0",
                "flash-attn": "2.7.4.post1", "triton": "3.4.0"}

# michael@spark-7d19 `free` (kB): total 125513720, free 118621120, buff/cache 2728844, available 120425308
HEALTHY_MEM = meminfo(MemTotal=125513720, MemFree=118621120, MemAvailable=120425308, Buffers=58112, Cached=2380112,
                      SReclaimable=290620, Shmem=20596, SwapTotal=16777212, SwapFree=16777212)


def _playbooks() -> PlaybookIssuesFacts:
    return PlaybookIssuesFacts(issues=list(PLAYBOOK_ISSUES), fetched_at=datetime(2026, 8, 26, 9, 29, 58, tzinfo=UTC),
                               source="rest")


def _quiet_memory(mem: dict[str, int]) -> MemoryFacts:
    return MemoryFacts(meminfo_bytes=mem, psi=PsiFacts(some_avg10=0.0, some_avg60=0.0, full_avg10=0.0, full_avg60=0.0),
                       cgroup=CgroupMemFacts(version=2, limit_bytes=None, usage_bytes=5_380_000_000,
                                             path="/system.slice/docker-3f2a9c1d7b4e.scope"))


# --------------------------------------------------------------------------- scenarios
def gb10_ngc_2509_healthy() -> Facts:
    """NGC PyTorch 25.09 with the matrix stack, idle box, matrix-fresh, issues fetched: ready."""
    return Facts(
        tool_version="0.1.0", collected_at=COLLECTED, depth="full", probes=_probes(),
        host=_gb10_host("3f2a9c1d7b4e", _ngc_container(), {"TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas",
                                                          "CUDA_HOME": "/usr/local/cuda"}),
        memory=_quiet_memory(HEALTHY_MEM),
        gpu=_gb10_gpu(),
        cuda_libs=_host_cuda_libs(),
        processes=ProcessFacts(processes=[], scanned=23),
        target=_ngc_target(MATRIX_DISTS, HEALTHY_MEM),
        configs=ConfigScanFacts(roots=["/workspace/finetuning"], files_read=9, hits=[], scanned=True),
        playbooks=_playbooks(),
    )


def gb10_bare_pip_cu128() -> Facts:
    """A venv on the host with torch from the cu128 index: CUDA 12 torch on a CUDA-13 Spark (G1 fail)."""
    venv = "/home/michael/venv"
    dists = {"torch": "2.9.1+cu128", "triton": "3.5.1", "nvidia-cuda-runtime-cu12": "12.8.90",
             "nvidia-cuda-nvrtc-cu12": "12.8.93", "nvidia-cublas-cu12": "12.8.4.1", "nvidia-cudnn-cu12": "9.10.2.21",
             "nvidia-nccl-cu12": "2.27.5", "transformers": "4.57.1", "peft": "0.17.1", "trl": "0.24.0",
             "datasets": "4.3.0", "accelerate": "1.11.0", "huggingface-hub": "0.36.0"}
    return Facts(
        tool_version="0.1.0", collected_at=COLLECTED, probes=_probes(),
        host=_gb10_host("spark-7d19", v1_container(markers=[], image_kind="none"), {"VIRTUAL_ENV": venv}),
        memory=_quiet_memory(HEALTHY_MEM).model_copy(update={"cgroup": CgroupMemFacts(
            version=2, limit_bytes=None, usage_bytes=4_900_000_000, path="/user.slice/user-1000.slice/session-3.scope")}),
        gpu=_gb10_gpu(driver="580.95.05"),
        cuda_libs=_host_cuda_libs(),
        processes=ProcessFacts(processes=[], scanned=412),
        target=TargetEnvFacts(
            python=f"{venv}/bin/python", chosen_because="--python", python_version="3.12.3",
            env=PythonEnvFacts(kind="venv", prefix=venv, base_prefix="/usr",
                               site_packages=[f"{venv}/lib/python3.12/site-packages"]),
            distributions=dists,
            torch=TorchStatic(version="2.9.1+cu128", cuda="12.8", local_tag="cu128",
                              location=f"{venv}/lib/python3.12/site-packages/torch"),
            extensions=[],
            live=_live("2.9.1+cu128", "12.8", ["sm_80", "sm_90", "sm_100", "sm_120"], HEALTHY_MEM),
        ),
        configs=ConfigScanFacts(roots=["/home/michael/finetune"], files_read=4, hits=[], scanned=True),
        playbooks=_playbooks(),
    )


def gb10_page_cache() -> Facts:
    """A large download sits in page cache: CUDA free (≈ MemFree) far below MemAvailable (G3 warn)."""
    # verbatim /proc/meminfo lines of a GB10 (gb10-readings §4.1, second block)
    mem = meminfo(MemTotal=125483396, MemFree=13355956, MemAvailable=94849180, Buffers=5256824, Cached=69323224,
                  SwapTotal=16777212, SwapFree=13096264)
    f = gb10_ngc_2509_healthy()
    return f.model_copy(update={
        "memory": _quiet_memory(mem).model_copy(update={"psi": PsiFacts(some_avg10=0.0, some_avg60=0.04,
                                                                         full_avg10=0.0, full_avg60=0.0)}),
        "target": _ngc_target(MATRIX_DISTS, mem),
        "host": f.host.model_copy(update={"hostname": "9b1e07c2d4aa"}),
    })


def gb10_vllm_default() -> Facts:
    """vLLM serving with its default --gpu-memory-utilization 0.9 beside a planned LoRA run (G6 warn)."""
    # jethac box (gb10-readings §1.1): driver 580.159.03, 42 °C, P0, 10 W, VLLM::EngineCore 96581 MiB
    mem = meminfo(MemTotal=125441420, MemFree=19873216, MemAvailable=24511232, Buffers=10240, Cached=4921040,
                  SReclaimable=312400, Shmem=8660, SwapTotal=16777212, SwapFree=16777212)
    venv = "/home/jethac/.venv"
    serve = f"{venv}/bin/python3 {venv}/bin/vllm serve Qwen/Qwen3-30B-A3B-Instruct-2507 --port 8000 --max-model-len 32768"
    procs = [
        # recorded by a schema-1 tool (the committed fixture is schema 1): its verdict, no argv
        HostProcess(pid=400650, name="vllm", cmdline=serve, rss_bytes=1_263_000_000, state="sleeping", ppid=398871,
                    argv=V1_LOST, v1_class=V1ProcessClass(kind="vllm", memory_fraction=0.9, memory_cap_source="default")),
        HostProcess(pid=400721, name="VLLM::EngineCore", cmdline=serve, rss_bytes=3_912_000_000, state="running",
                    ppid=400650, argv=V1_LOST,
                    v1_class=V1ProcessClass(kind="vllm", memory_fraction=0.9, memory_cap_source="default")),
    ]
    gpu_procs = [GpuProcess(pid=329657, name="/usr/lib/xorg/Xorg", kind="graphics", used_memory_bytes=43 * MIB),
                 GpuProcess(pid=329691, name="/usr/bin/gnome-shell", kind="graphics", used_memory_bytes=16 * MIB),
                 GpuProcess(pid=400721, name="VLLM::EngineCore", kind="compute", used_memory_bytes=96581 * MIB)]
    dists = {"torch": "2.11.0+cu130", "triton": "3.6.0", "nvidia-cuda-runtime": "13.0.96", "transformers": "5.13.1",
             "peft": "0.19.1", "trl": "1.8.0", "datasets": "4.3.0", "accelerate": "1.11.0", "huggingface-hub": "1.24.0"}
    return Facts(
        tool_version="0.1.0", collected_at=COLLECTED, probes=_probes(),
        host=_gb10_host("thinkstationpgx-00b4", v1_container(markers=[], image_kind="none"),
                        {"VIRTUAL_ENV": venv, "TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas"},
                        kernel="6.17.0-1021-nvidia"),
        memory=_quiet_memory(mem).model_copy(update={"cgroup": CgroupMemFacts(
            version=2, limit_bytes=None, usage_bytes=9_700_000_000, path="/user.slice/user-1000.slice/session-2.scope")}),
        gpu=_gb10_gpu(processes=gpu_procs),
        cuda_libs=_host_cuda_libs(),
        processes=ProcessFacts(processes=procs, scanned=388),
        target=TargetEnvFacts(
            python=f"{venv}/bin/python", chosen_because="--python", python_version="3.12.3",
            env=PythonEnvFacts(kind="uv", prefix=venv, base_prefix="/usr",
                               site_packages=[f"{venv}/lib/python3.12/site-packages"]),
            distributions=dists,
            torch=TorchStatic(version="2.11.0+cu130", cuda="13.0", local_tag="cu130",
                              location=f"{venv}/lib/python3.12/site-packages/torch"),
            extensions=[],
            # torch.cuda.get_device_properties(0).total_memory 128452014080 = MemTotal x 1024 (§5.1)
            live=_live("2.11.0+cu130", "13.0", CU130_ARCHS, mem),
        ),
        configs=ConfigScanFacts(roots=["/home/jethac/lora"], files_read=3, hits=[], scanned=True),
        playbooks=_playbooks(),
    )


def gb10_two_node_tp2() -> Facts:
    """Two Sparks, a vLLM recipe with tensor_parallel_size: 2 launched as WORLD_SIZE=2 / LOCAL_WORLD_SIZE=1 (G10 fail)."""
    # the 121.7 GiB cluster box (gb10-readings §3.1, §4.2): MemTotal 127600748 kB, MemAvailable 118566368 kB
    mem = meminfo(MemTotal=127600748, MemFree=116810452, MemAvailable=118566368, Buffers=40960, Cached=1421312,
                  SReclaimable=262144, Shmem=37120, SwapTotal=16777212, SwapFree=16777212)
    torch_v = "2.10.0a0+b558c986e8.nv25.11"
    root = "/home/nvidia/spark-serve"
    return Facts(
        tool_version="0.1.0", collected_at=COLLECTED, probes=_probes(),
        host=_gb10_host("spark-5fa1", v1_container(markers=["/.dockerenv"], image_kind="other",
                                                      nvidia_env={"NVIDIA_VISIBLE_DEVICES": "all"}),
                        {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "192.168.1.223",
                         "MASTER_PORT": "29500", "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1", "NCCL_IB_GID_INDEX": "3",
                         "TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas"}),
        memory=_quiet_memory(mem),
        gpu=_gb10_gpu(driver="580.173.02"),
        cuda_libs=_host_cuda_libs(),
        processes=ProcessFacts(processes=[], scanned=61),
        target=TargetEnvFacts(
            python="/usr/bin/python", chosen_because="python3 on PATH", python_version="3.12.3",
            env=PythonEnvFacts(kind="system", prefix="/usr"),
            distributions={"torch": torch_v, "vllm": "0.11.0+582e4e37.nv25.11.cu130", "triton": "3.5.0",
                           "transformers": "4.57.1", "huggingface-hub": "0.36.0"},
            torch=TorchStatic(version=torch_v, cuda="13.0", local_tag="b558c986e8.nv25.11"),
            extensions=[],
            live=_live(torch_v, "13.0", ["sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120"], mem),
        ),
        configs=ConfigScanFacts(
            roots=[root], files_read=6, scanned=True,
            hits=[ConfigHit(file=f"{root}/recipes/qwen3-235b.yaml", line=7, key="tensor_parallel_size", value="2"),
                  ConfigHit(file=f"{root}/launch.sh", line=14, key="--nnodes", value="2", kind="nodes")]),
        playbooks=_playbooks(),
    )


def gb10_torchao_013() -> Facts:
    """NGC 25.09 with the bare-pip lines 1-2 but not line 3: torchao 0.13.0+git beside peft 0.19.1 (G9 fail)."""
    dists = {**MATRIX_DISTS, "torchao": "0.13.0+git", "unsloth": "2026.7.2", "unsloth-zoo": "2026.7.2"}
    f = gb10_ngc_2509_healthy()
    env = {**f.host.env, "HF_HUB_ENABLE_HF_TRANSFER": "1"}
    return f.model_copy(update={
        "host": f.host.model_copy(update={"env": env, "hostname": "c81d5e0f9a37"}),
        "target": _ngc_target(dists, HEALTHY_MEM),
    })


def h200_generic() -> Facts:
    """An H200 SXM host (shared/spec/platforms.md): generic NVIDIA profile, discrete memory, 700 W limit."""
    total = 143771 * MIB
    used = 562 * MIB
    mem = meminfo(MemTotal=2113612752, MemFree=2051722312, MemAvailable=2079561088, Buffers=1433600, Cached=29360128,
                  SReclaimable=3145728, Shmem=65536, SwapTotal=0, SwapFree=0)
    venv = "/opt/venv"
    return Facts(
        tool_version="0.1.0", collected_at=COLLECTED, probes=_probes(playbooks=ProbeRecord(
            name="playbooks", ok=False, duration_s=4.0, reason="timeout: api.github.com did not answer in 4.0 s")),
        host=HostFacts(arch="x86_64", kernel="6.8.0-85-generic",
                       os_release={"NAME": "Ubuntu", "VERSION_ID": "22.04", "PRETTY_NAME": "Ubuntu 22.04.5 LTS"},
                       dmi_product="PowerEdge XE9680", cpu_model="Intel(R) Xeon(R) Platinum 8480+", cpu_count=224,
                       hostname="h200-node-03", container=v1_container(markers=[], image_kind="none"),
                       env={"VIRTUAL_ENV": venv}, dev_nvidia={"/dev/nvidia0": "rw", "/dev/nvidiactl": "rw"}),
        memory=MemoryFacts(meminfo_bytes=mem, psi=PsiFacts(some_avg10=0.0, some_avg60=0.0, full_avg10=0.0, full_avg60=0.0),
                           cgroup=CgroupMemFacts(version=2, limit_bytes=None, usage_bytes=12_000_000_000)),
        gpu=GpuFacts(source="nvml", driver_version="580.159.04", cuda_driver_version="13.0", devices=[GpuDevice(
            index=0, name="NVIDIA H200", pci_bus_id="00000000:18:00.0", capability=(9, 0), multiprocessor_count=132,
            memory_total_bytes=total, memory_used_bytes=used, memory_free_bytes=total - used, addressing_mode="none",
            power_draw_w=76.0, power_limit_w=700.0, temperature_c=31.0, sm_clock_mhz=345.0, sm_clock_max_mhz=1980.0,
            utilization_pct=0.0, pstate="P0", clock_event_reasons=0x1,
            violation_us={"sw_power_cap": 0, "sync_boost": 0, "sw_thermal": 0, "hw_thermal": 0, "hw_power_brake": 0},
            violation_us_end={"sw_power_cap": 0, "sync_boost": 0, "sw_thermal": 0, "hw_thermal": 0, "hw_power_brake": 0},
            violation_window_s=0.5, processes=[])]),
        cuda_libs=CudaLibFacts(ldconfig={"libcuda.so.1": ["/lib/x86_64-linux-gnu/libcuda.so.1"]},
                               cudart13_load=missing(Why.not_found, "libcudart.so.13: cannot open shared object file"),
                               cudart13_error="libcudart.so.13: cannot open shared object file: No such file or directory",
                               cuobjdump=missing(Why.not_found, "cuobjdump not on PATH")),
        processes=ProcessFacts(processes=[], scanned=1204),
        target=TargetEnvFacts(
            python=f"{venv}/bin/python", chosen_because="--python", python_version="3.11.13",
            env=PythonEnvFacts(kind="venv", prefix=venv, base_prefix="/usr"),
            distributions={"torch": "2.11.0+cu130", "triton": "3.6.0", "nvidia-cuda-runtime": "13.0.96",
                           "transformers": "5.13.1", "peft": "0.19.1", "trl": "1.8.0", "datasets": "4.3.0"},
            torch=TorchStatic(version="2.11.0+cu130", cuda="13.0", local_tag="cu130",
                              location=f"{venv}/lib/python3.11/site-packages/torch"),
            extensions=[],
            live=TorchLive(import_ok=True, duration_s=5.3, import_duration_s=4.7, stage="done", version="2.11.0+cu130",
                           cuda="13.0", cuda_available=True, device_count=1, device_name="NVIDIA H200", capability=(9, 0),
                           arch_list=["sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
                           mem_get_info_bytes=(total - used - 512 * MIB, total), total_memory_bytes=total,
                           flash_sdp_enabled=True, mem_efficient_sdp_enabled=True, math_sdp_enabled=True),
        ),
        configs=ConfigScanFacts(scanned=False),
        playbooks=PlaybookIssuesFacts(issues=missing(Why.timeout, "api.github.com did not answer in 4.0 s"),
                                      note="no cache yet"),
    )


def no_gpu() -> Facts:
    """NGC container on a Spark started without `--runtime=nvidia --gpus all`: no GPU visible (identity fail)."""
    f = gb10_ngc_2509_healthy()
    live = _live(NGC_2509_TORCH, "13.0", [], None, cuda_available=False, device_count=0, device_name="",
                 capability=None, flash_attn_import=True,
                 cuda_error="Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
                            "installed a driver from http://www.nvidia.com/Download/index.aspx")
    host = f.host.model_copy(update={
        "dev_nvidia": missing(Why.not_found, "no /dev/nvidia* device nodes"), "hostname": "5d0c4b1e2f63",
        "container": f.host.container.model_copy(update={"nvidia_env": {"NVIDIA_PYTORCH_VERSION": "25.09"}})})
    return f.model_copy(update={
        # the probe ran to completion and found no GPU: ok (as the runner records it), source "none"
        "probes": _probes(gpu_source="none", gpu=ProbeRecord(name="gpu", ok=True, duration_s=0.02, source="none")),
        "host": host,
        "gpu": GpuFacts(source="none", driver_version=missing(Why.not_found, "no NVIDIA driver"),
                        cuda_driver_version=missing(Why.not_found, "no NVIDIA driver"), devices=[],
                        nvml_error="NVML Shared Library Not Found (libnvidia-ml.so.1)",
                        smi_error="nvidia-smi: not found on PATH"),
        "target": f.target.model_copy(update={"live": live}),
        "processes": ProcessFacts(processes=[], scanned=9),
        # the container's own CUDA runtime is there; the driver's libcuda.so.1 is only injected by the runtime
        "cuda_libs": _host_cuda_libs().model_copy(update={"ldconfig": {
            k: v for k, v in _host_cuda_libs().ldconfig.items() if k != "libcuda.so.1"}}),
    })


SCENARIOS: dict[str, Callable[[], Facts]] = {
    "gb10_ngc_2509_healthy": gb10_ngc_2509_healthy,
    "gb10_bare_pip_cu128": gb10_bare_pip_cu128,
    "gb10_page_cache": gb10_page_cache,
    "gb10_vllm_default": gb10_vllm_default,
    "gb10_two_node_tp2": gb10_two_node_tp2,
    "gb10_torchao_013": gb10_torchao_013,
    "h200_generic": h200_generic,
    "no_gpu": no_gpu,
}

# the workload each scenario is replayed with (what the user said they were about to run)
WORKLOADS: dict[str, Workload] = {
    "gb10_ngc_2509_healthy": Workload(text="lora 8b bf16 trl peft", method="lora", params_b=8, precision="bf16",
                                      components=["trl", "peft"], estimated_peak_gb=32.0),
    "gb10_bare_pip_cu128": Workload(text="lora 8b transformers peft", method="lora", params_b=8,
                                    components=["transformers", "peft"]),
    "gb10_page_cache": Workload(text="lora 27b bf16 trl", method="lora", params_b=27, precision="bf16",
                                components=["trl"], estimated_peak_gb=70.0),
    "gb10_vllm_default": Workload(text="lora 8b bf16 trl", method="lora", params_b=8, precision="bf16",
                                  components=["trl"]),
    "gb10_two_node_tp2": Workload(text="serve vllm nccl on 2 sparks", method="inference", components=["vllm", "nccl"]),
    "gb10_torchao_013": Workload(text="lora 27b unsloth", method="lora", params_b=27, components=["unsloth"]),
    "h200_generic": Workload(text="lora 8b bf16", method="lora", params_b=8, precision="bf16"),
    "no_gpu": Workload(),
}


def build(name: str) -> Facts:
    """A scenario's snapshot, re-validated through the model (as a replay would load it). The scenarios
    are schema-1 recordings: a container they leave at its defaults was judged "not collected" then."""
    data = json.loads(SCENARIOS[name]().model_dump_json())
    cont = data["host"]["container"]
    if cont.get("v1_class") is None:
        cont["v1_class"] = V1ContainerClass().model_dump(mode="json")
    return Facts.model_validate(data)


def fixture_text(name: str) -> str:
    return json.dumps(json.loads(build(name).model_dump_json()), indent=1, sort_keys=True) + "\n"


# --------------------------------------------------------------------------- test helpers
def patch(facts: Facts, changes: dict[str, Any]) -> Facts:
    """A copy of ``facts`` with dotted paths replaced (``"gpu.devices.0.temperature_c": 90``), re-validated."""
    data = facts.model_dump()
    for path, value in changes.items():
        node: Any = data
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return Facts.model_validate(data)


def run_check(gid: str, facts: Facts, workload: Workload | None = None) -> Finding:
    """One check on one snapshot; unlike ``judge`` this lets a check's exception reach the test."""
    return CHECKS[gid].check(context(facts, load(), workload))


def main() -> None:
    FACTS_DIR.mkdir(parents=True, exist_ok=True)
    for name in SCENARIOS:
        (FACTS_DIR / f"{name}.json").write_text(fixture_text(name), encoding="utf-8")
        print(f"wrote {FACTS_DIR / name}.json")


if __name__ == "__main__":
    main()
