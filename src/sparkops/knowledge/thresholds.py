"""Typed sections of ``thresholds.yaml``: one pydantic model per section, units in the field names.

A misspelled key in the YAML fails loading (``extra="forbid"``) and a misspelled attribute in the
code is an ``AttributeError`` a test finds (tests/test_knowledge_typed.py scans every
``.thresholds.`` chain in the source against these models). Numbers live in the YAML, never here:
no field has a default.
"""

from __future__ import annotations

from sparkops.core.modeling import BaseModel, ConfigDict, Field, model_validator
from sparkops.core.units import GIB, MIB


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class G1(_Section):
    """CUDA ABI (G1): PyTorch wheel indexes, per-CUDA library variants, sonames -> the wheels shipping them."""

    torch_indexes: tuple[str, ...]  # download.pytorch.org/whl/<index>, oldest first
    per_cuda_variant_token: str  # regex: the CUDA token in a per-CUDA-version library's file name
    cuda_lib_wheels: dict[str, list[str]]  # DT_NEEDED soname -> pip distributions that ship it
    fallback_cuda_major: int  # the CUDA major torch must carry when the driver's CUDA version was not read


class G3(_Section):
    """Unified memory (G3). GB here is GiB (1024**3 bytes), as the checks compute it."""

    os_reserve_gb: float  # MemAvailable minus this = the budget
    page_cache_warn_gb: float  # reclaimable cache that makes CUDA-visible free << MemAvailable
    fit_margin_fraction: float = Field(ge=0, lt=1)  # planned peak within this share of the budget -> warn
    psi_full_avg10_warn: float  # percent of time all tasks stalled on memory (avg10)
    low_available_warn_gb: float
    swap_used_warn_gb: float


class G4(_Section):
    """Thermal and power (G4)."""

    hot_c: float  # degrees Celsius
    thermal_reason_mask: int  # NVML clock-event reason bits that mean heat
    counter_growth_warn_us: int  # thermal violation counters growing this many microseconds in the window
    thermal_counters: tuple[str, ...]  # violation counters that mean heat, not the power cap
    low_clock_mhz: float  # SM clock below this while busy looks like GB10's low-clock state
    busy_util_pct: float  # "busy" = at least this GPU utilisation, percent


class G6(_Section):
    """Memory contention (G6). GB here is GiB."""

    near_capacity_fraction: float = Field(gt=0, le=1)
    heavy_neighbour_gb: float  # a GPU process holding more than this is heavy
    dstate_recheck_s: float  # a process in D state is looked at again after this long
    dstate_min_gb: float  # a stuck process holding less than this does not contend
    default_caps: dict[str, float]  # engine -> share of the pool it takes without a cap
    cap_flags: dict[str, tuple[str, ...]]  # engine -> flags (dashes read as underscores) carrying its share


class G7(_Section):
    """NVFP4 (G7)."""

    nvfp4_min_capability_major: int
    sm121_capability: tuple[int, int]  # GB10's compute capability: NVFP4 needs sm_121a kernels there
    sm121a_markers: tuple[str, ...]  # build-target evidence of sm_121a kernels
    kernel_packages: tuple[str, ...]  # distributions whose extensions are read for sm_121a code


class G8(_Section):
    """Stale playbooks (G8)."""

    installed_components: dict[str, str]  # distribution -> the component word playbook issues use
    cache_ttl_s: float
    timeout_s: float


class G9(_Section):
    """Container first (G9)."""

    hf_transfer_deprecated_hub: str  # huggingface_hub version from which HF_HUB_ENABLE_HF_TRANSFER is deprecated
    triton_dists: tuple[str, ...]
    triton_capability: tuple[int, int]  # where the bundled ptxas rejects the target
    host_os_release_keys: tuple[str, ...]  # /etc/os-release keys only DGX OS on the host carries


class G10(_Section):
    """Tensor parallel (G10): launcher/key word lists and the config scan's bounds."""

    serve_launchers: tuple[str, ...]
    train_launchers: tuple[str, ...]
    serve_keys: tuple[str, ...]
    train_keys: tuple[str, ...]
    tool_json_keys: tuple[str, ...]  # JSON written by this tool: never a launch config
    not_config_names: tuple[str, ...]  # files beside configs that never hold parallel settings
    max_files: int = Field(ge=1)
    max_file_bytes: int = Field(ge=1)
    max_depth: int = Field(ge=0)
    time_budget_s: float = Field(gt=0)
    ignore_dirs: tuple[str, ...]


class Probes(_Section):
    """Collection bounds, seconds unless named otherwise."""

    budget_s: float = Field(gt=0)  # whole-collection deadline
    subprocess_timeout_s: float = Field(gt=0)
    nvml_timeout_s: float = Field(gt=0)
    target_live_timeout_s: float = Field(gt=0)
    target_quick_timeout_s: float = Field(gt=0)
    elf_max_files: int = Field(ge=1)
    elf_budget_s: float = Field(gt=0)
    process_record_words: tuple[str, ...]  # a process whose argv/name holds one of these is recorded raw


class Analyze(_Section):
    """The streaming G3/G4/G6 detector (monitor/analyze.py). GB here is 1e9 bytes, as the detector computes it."""

    window_samples: int
    confirm_samples: int
    release_samples: int
    plateau_fraction: float
    flat_fraction: float
    plateau_min_s: float
    clock_drop_fraction: float
    ref_samples: int
    climb_window_s: float
    climb_c: float
    risen_c: float
    low_clock_power_w: float
    low_clock_confirm_samples: int
    load_util_pct: float
    load_power_w: float
    verdict_min_s: float
    reason_confirm_samples: int
    mem_trend_window_s: float
    mem_horizon_s: float
    mem_min_decline_gb: float
    mem_recent_s: float
    cuda_free_floor_gb: float
    swap_growth_gb: float
    throttle_power_drop_fraction: float
    throttle_power_min_fraction: float


class Monitor(_Section):
    """Sampler, watch and the detector."""

    sampler_interval_s: float = Field(gt=0)
    sampler_min_interval_s: float = Field(gt=0)
    sampler_nvml_timeout_s: float = Field(gt=0)
    sampler_smi_timeout_s: float = Field(gt=0)
    sampler_smi_retry_s: float = Field(ge=0)
    sampler_start_timeout_s: float = Field(gt=0)
    sampler_stop_timeout_s: float = Field(gt=0)
    watch_interval_s: float = Field(gt=0)
    watch_kill_grace_s: float = Field(ge=0)
    watch_drain_timeout_s: float = Field(ge=0)
    watch_stop_timeout_s: float = Field(ge=0)
    watch_plot_max_points: int = Field(ge=2)
    analyze: Analyze


class Bandwidth(_Section):
    """Refusal, sizing, timing and judgment numbers of the G5 measurement (units in the names)."""

    min_free_gb: float = Field(ge=0)
    neighbour_kinds: tuple[str, ...]
    l2_multiple: int = Field(ge=1)
    floor_mib: int = Field(ge=1)
    buffer_cap_bytes: int = Field(gt=0)
    total_cap_bytes: int = Field(gt=0)
    free_fraction: float = Field(gt=0, le=1)
    warmup_iters: int = Field(ge=1)
    reps: int = Field(ge=1)
    rep_target_ms: float = Field(gt=0)
    max_inner: int = Field(ge=1)
    timeout_s: float = Field(gt=0)
    container_timeout_s: float = Field(gt=0)
    expected_gbs: dict[str, dict[str, tuple[float, float]]] = Field(default_factory=dict)
    below_fraction: float = Field(gt=0, le=1)
    far_below_fraction: float = Field(gt=0, le=1)
    spec_floor_fraction: float = Field(gt=0, le=1)

    @model_validator(mode="after")
    def _consistent(self) -> Bandwidth:
        if self.far_below_fraction > self.below_fraction:
            raise ValueError("far_below_fraction must not exceed below_fraction")
        if self.floor_bytes > self.buffer_cap_bytes:
            raise ValueError("floor_mib must not exceed buffer_cap_bytes")
        for key, methods in self.expected_gbs.items():
            for method, (lo, hi) in methods.items():
                if method not in ("copy", "read") or not 0 < lo <= hi:
                    raise ValueError(f"expected_gbs.{key}.{method}: want copy|read with 0 < low <= high")
        return self

    @property
    def floor_bytes(self) -> int:
        return self.floor_mib * MIB

    @property
    def min_free_bytes(self) -> int:
        return int(self.min_free_gb * GIB)


class Setup(_Section):
    """``setup bare-pip --exec`` and ``--container`` bounds, seconds."""

    pip_step_timeout_s: float = Field(gt=0)
    verify_timeout_s: float = Field(gt=0)
    precheck_timeout_s: float = Field(gt=0)
    stderr_tail_lines: int = Field(ge=0)
    container_inspect_timeout_s: float = Field(gt=0)
    container_quick_timeout_s: float = Field(gt=0)
    container_live_timeout_s: float = Field(gt=0)
    container_budget_s: float = Field(gt=0)


class Fragmentation(_Section):
    """G3.fragmented, judged on /proc/buddyinfo. GB here is 1e9 bytes."""

    large_block_bytes: int = Field(gt=0)
    min_free_gb: float = Field(ge=0)
    large_fraction_warn: float = Field(ge=0, le=1)
    unmovable_share_reboot: float = Field(ge=0, le=1)


class Soak(_Section):
    """``thermal soak``: the bounded load and the ``--compare`` tolerances."""

    interval_s: float = Field(gt=0)
    preroll_s: float = Field(ge=0)
    cooldown_s: float = Field(ge=0)
    start_timeout_s: float = Field(gt=0)
    stop_grace_s: float = Field(gt=0)
    max_minutes: float = Field(gt=0)
    max_matrix_bytes: int = Field(gt=0)
    ramp_fraction: float = Field(gt=0, le=1)
    tflops_drop_fraction: float
    clock_drop_fraction: float
    power_drop_fraction: float
    temp_rise_c: float
    cv_rise_pct: float


class Thresholds(_Section):
    """Every section of ``thresholds.yaml``."""

    g1: G1
    g3: G3
    g4: G4
    g6: G6
    g7: G7
    g8: G8
    g9: G9
    g10: G10
    probes: Probes
    monitor: Monitor
    bandwidth: Bandwidth
    setup: Setup
    fragmentation: Fragmentation
    soak: Soak
