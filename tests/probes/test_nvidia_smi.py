"""nvidia-smi parsers on the recorded GB10 captures (tests/fixtures/raw/nvidia_smi, verbatim from
shared/reference/gb10-readings.md §1–§2), plus property tests: no input makes a parser raise."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from sparkops.facts.model import GpuDevice
from sparkops.facts.reading import Unavailable, Why, known
from sparkops.probes import nvidia_smi as smi

RAW = FIXTURES / "raw" / "nvidia_smi"
MIB = 1024 * 1024


def raw(name: str) -> str:
    return (RAW / name).read_text(encoding="utf-8")


def captured_query(name: str) -> tuple[list[str], str, str]:
    """A capture that starts with its own command line: (fields asked for, --format, output)."""
    first, _, rest = raw(name).partition("\n")
    m = re.search(r"--query-(?:gpu|compute-apps)=(\S+)\s+--format=(\S+)", first)
    assert m, f"{name} does not start with the nvidia-smi command"
    return m.group(1).split(","), m.group(2), rest


def not_supported(value: object) -> bool:
    return isinstance(value, Unavailable) and value.unavailable == Why.not_supported


def only(devices: list[GpuDevice]) -> GpuDevice:
    assert len(devices) == 1, devices
    return devices[0]


# --------------------------------------------------------------------------- §1 default table
def test_table_1_1_gb10_with_vllm_resident():
    t = smi.parse_table(raw("table_1.1_gb10_vllm_580.159.03.txt"))
    assert t.header == smi.SmiHeader(smi_version="580.159.03", driver_version="580.159.03", cuda_version="13.0")
    d = only(t.devices)
    assert (d.index, d.name, d.pci_bus_id) == (0, "NVIDIA GB10", "0000000F:01:00.0")
    assert (d.temperature_c, d.pstate, d.power_draw_w, d.utilization_pct) == (42.0, "P0", 10.0, 0.0)
    assert not_supported(d.power_limit_w)  # "10W /  N/A": GB10 has no enforced cap
    for mem in (d.memory_total_bytes, d.memory_used_bytes, d.memory_free_bytes):
        assert not_supported(mem), mem  # "Not Supported": unified memory, never a number
    procs = d.processes
    assert not isinstance(procs, Unavailable)
    assert [(p.pid, p.name, p.kind, p.used_memory_bytes) for p in procs] == [
        (329657, "/usr/lib/xorg/Xorg", "graphics", 43 * MIB),
        (329691, "/usr/bin/gnome-shell", "graphics", 16 * MIB),
        (400721, "VLLM::EngineCore", "compute", 96581 * MIB),
    ]


def test_table_1_2_idle_p8_without_process_box():
    t = smi.parse_table(raw("table_1.2_gb10_idle_p8_580.95.05.txt"))
    assert t.header.driver_version == "580.95.05" and t.header.cuda_version == "13.0"
    d = only(t.devices)
    assert (d.temperature_c, d.pstate, d.power_draw_w) == (32.0, "P8", 4.0)
    assert not_supported(d.memory_total_bytes) and not_supported(d.power_limit_w)
    # the capture was cut before the process box: unknown, not "no processes"
    assert isinstance(d.processes, Unavailable) and d.processes.unavailable == Why.not_collected


def test_table_1_3_stress_at_the_105w_ceiling():
    d = only(smi.parse_table(raw("table_1.3_gb10_stress_105w_580.95.05.txt")).devices)
    assert (d.power_draw_w, d.temperature_c, d.utilization_pct, d.pstate) == (105.0, 74.0, 96.0, "P0")
    assert [(p.pid, p.name, p.kind, p.used_memory_bytes) for p in d.processes] == [
        (452072, "./dgx-spark-stress", "compute", 87012 * MIB)]


def test_table_1_4_two_vllm_servers_amid_other_output():
    t = smi.parse_table(raw("table_1.4_gx10_two_vllm_580.173.02.txt"))  # `free -h` lines come first
    assert t.header.driver_version == "580.173.02" and t.header.cuda_version == "13.0"
    d = only(t.devices)
    assert (d.power_draw_w, d.temperature_c, d.utilization_pct) == (44.0, 63.0, 96.0)
    assert not_supported(d.memory_used_bytes)
    assert [(p.pid, p.used_memory_bytes) for p in d.processes] == [(6008, 56501 * MIB), (44757, 48829 * MIB)]
    assert all(p.name == "VLLM::EngineCore" and p.kind == "compute" for p in d.processes)


def test_table_1_5_display_attached_row():
    d = only(smi.parse_table(raw("table_1.5_row_display_on_580.95.05.txt")).devices)
    assert (d.name, d.pci_bus_id) == ("NVIDIA GB10", "0000000F:01:00.0")
    assert not known(d.temperature_c)  # the second row is not in the capture: nothing invented


def test_header_610_renamed_fields():
    h = smi.parse_header(raw("header_1.5_610_gtx1650.txt"))
    assert h == smi.SmiHeader(smi_version="610.57.04", driver_version="610.57.04", cuda_version="13.3")


def test_q_610_deprecated_version_lines():
    q = smi.parse_q(raw("q_1.5_610_version_lines.txt"))
    assert (q.driver_version, q.cuda_version) == ("610.57.04", "13.3")  # bracket notes dropped


def test_q_prefers_umd_and_kmd_names_when_both_printed():
    text = ("Driver Version : 610.57.04 [Deprecated; will be removed]\n"
            "KMD Version : 610.57.05\nCUDA Version : 13.3 [Deprecated]\nCUDA UMD Version : 13.4\n")
    q = smi.parse_q(text)
    assert (q.driver_version, q.cuda_version) == ("610.57.05", "13.4")


# --------------------------------------------------------------------------- §2 csv
def test_csv_2_1_name_capability_driver_memory_total():
    fields, fmt, out = captured_query("csv_2.1_name_cap_driver_memtotal_580.159.03.txt")
    assert fmt == "csv,noheader"
    rows = smi.parse_query_csv(out, fields)
    d = only(smi.devices_from_rows(rows))
    assert (d.name, d.capability) == ("NVIDIA GB10", (12, 1))
    assert smi.driver_from_rows(rows) == "580.159.03"
    assert not_supported(d.memory_total_bytes)
    assert not known(d.memory_used_bytes)  # not asked for: stays not_collected


def test_csv_2_1_nounits_memory_na_and_utilization():
    fields, fmt, out = captured_query("csv_2.1_name_memused_memtotal_util_nounits.txt")
    assert "nounits" in fmt
    d = only(smi.devices_from_rows(smi.parse_query_csv(out, fields)))
    assert not_supported(d.memory_used_bytes) and not_supported(d.memory_total_bytes)
    assert d.utilization_pct == 6.0


def test_csv_2_1_with_header_and_units():
    fields, fmt, out = captured_query("csv_2.1_header_memory_util_power_temp_580.173.02.txt")
    assert fmt == "csv"
    rows = smi.parse_query_csv(out)  # names come from the header line, units stripped
    assert list(rows[0]) == ["memory.total", "memory.used", "memory.free", "utilization.gpu", "power.draw",
                             "temperature.gpu"]
    assert list(rows[0]) == fields
    d = only(smi.devices_from_rows(rows))
    assert all(not_supported(m) for m in (d.memory_total_bytes, d.memory_used_bytes, d.memory_free_bytes))
    assert (d.utilization_pct, d.power_draw_w, d.temperature_c) == (0.0, 11.17, 35.0)


def test_csv_2_1_llama_swap_three_values():
    cells = raw("csv_2.1_llama_swap_memory_util.txt").strip().split(", ")
    assert not_supported(smi.classify(cells[0])) and not_supported(smi.classify(cells[1]))
    assert smi.number(cells[2]) == 0.0


def test_compute_apps_2_1_per_process_memory_on_gb10():
    fields, _, out = captured_query("compute_apps_2.1_llama_swap.txt")
    (p,) = smi.parse_compute_apps(out, fields)
    assert p.gpu == "GPU-..."
    assert (p.process.pid, p.process.name, p.process.kind) == (114687, "/usr/local/bin/python", "compute")
    assert p.process.used_memory_bytes == 19135 * MIB


def test_probe_dump_2_1_inventory_and_pcie_lines():
    lines = raw("probe_dump_2.1_580.142.txt").splitlines()
    pairs = [(lines[i].removeprefix("columns: ").split(","), lines[i + 1])
             for i, line in enumerate(lines) if line.startswith("columns:")]
    assert len(pairs) == 4
    fields, data = pairs[0]
    rows = smi.parse_query_csv(data, fields)
    d = only(smi.devices_from_rows(rows))
    assert (d.index, d.name, d.pci_bus_id, d.capability) == (0, "NVIDIA GB10", "0000000F:01:00.0", (12, 1))
    assert smi.driver_from_rows(rows) == "580.142"
    assert not_supported(d.memory_total_bytes)
    (pcie,) = smi.parse_query_csv(pairs[2][1], pairs[2][0])
    assert (pcie["pcie.link.gen.max"], pcie["pcie.link.width.max"]) == ("1", "16")
    (ids,) = smi.parse_query_csv(pairs[1][1], pairs[1][0])
    assert smi.bitmask(ids["pci.device_id"]) == 0x2E1210DE
    # the version block reads like -q: driver and CUDA
    q = smi.parse_q(raw("probe_dump_2.1_580.142.txt"))
    assert (q.driver_version, q.cuda_version) == ("580.142", "13.0")


def test_csv_2_2_clocks_graphics_header():
    rows = smi.parse_query_csv(raw("csv_2.2_header_clocks_graphics_580.173.02.txt"))
    d = only(smi.devices_from_rows(rows))
    assert (d.sm_clock_mhz, d.sm_clock_max_mhz, d.temperature_c, d.power_draw_w) == (2522.0, 3003.0, 50.0, 15.57)


def test_csv_2_2_vllm_cpp_line_values():
    (row,) = smi.parse_query_csv(raw("csv_2.2_vllm_cpp_580.173.02.txt"), ["name", "compute_cap", "driver_version",
                                                                           "f4", "f5"])
    assert smi.capability(row["compute_cap"]) == (12, 1)
    assert smi.classify(row["f4"]) == "Enabled" and smi.number(row["f5"]) == 3003.0


def test_elided_bitmask_is_not_guessed():
    text = raw("reasons_2.2_bitmask_samples.txt")
    masks = re.findall(r"0x\S+", text)
    assert len(masks) == 4
    assert all(isinstance(smi.bitmask(m), Unavailable) for m in masks)  # "0x…0020": the author cut it


@pytest.mark.parametrize("name", ["lgc_2.2_clocks_set_580.173.02.txt", "pl_2.3_power_limit_refused.txt"])
def test_clock_and_power_limit_messages_are_not_host_errors(name):
    text = raw(name)
    assert smi.parse_host_error(text) == ""
    assert smi.parse_table(text).devices == []
    assert smi.parse_query_csv(text, smi.QUERY_FIELDS) == []


# --------------------------------------------------------------------------- §2 -q
def test_q_2_3_performance_block():
    q = smi.parse_q(raw("q_2.3_performance_580.95.05.txt"))
    assert (q.driver_version, q.cuda_version) == ("580.95.05", "13.0")
    (g,) = q.gpus
    assert (g.bus_id, g.pstate) == ("0000000F:01:00.0", "P0")
    assert len(g.reasons_active) == 9 and not any(g.reasons_active.values())
    assert g.reasons_mask == 0
    # the author's "### <--- Throttled for 14 hours?" note after the value is ignored
    assert g.counters_us == {"sw_power_cap": 50284264713, "sync_boost": 0, "sw_thermal": 0, "hw_thermal": 0,
                             "hw_power_brake": 0}


def test_q_2_3_ollama_counters_fragment():
    (g,) = smi.parse_q(raw("q_2.3_ollama_counters_580.95.05.txt")).gpus
    assert g.counters_us["sw_thermal"] == 173453251 and g.counters_us["hw_thermal"] == 403805
    assert g.counters_us["sw_power_cap"] == 0 and g.counters_us["hw_power_brake"] == 0


def test_q_active_reasons_build_the_nvml_mask():
    text = raw("q_2.3_performance_580.95.05.txt")
    text = text.replace("SW Thermal Slowdown               : Not Active", "SW Thermal Slowdown               : Active")
    text = text.replace("    HW Thermal Slowdown           : Not Active", "    HW Thermal Slowdown           : Active")
    (g,) = smi.parse_q(text).gpus
    assert g.reasons_mask == 0x20 | 0x40


def test_q_2_4_fragments():
    (g,) = smi.parse_q(raw("q_2.4_nomad_product_bar1_580.95.05.txt")).gpus
    assert (g.bus_id, g.name) == ("0000000F:01:00.0", "NVIDIA GB10")
    (g,) = smi.parse_q(raw("q_2.4_nvtop_fb_memory_580.142.txt")).gpus
    assert set(g.memory) == {"total", "used", "free"}
    assert all(not_supported(smi.classify(v)) for v in g.memory.values())


# --------------------------------------------------------------------------- other shapes
def test_h200_query_gpu_runner_fields():
    # real capture: nvidia-smi on an H200 (device machine), the runner's exact field list, nounits
    rows = smi.parse_query_csv(raw("h200_query_gpu_nounits_580.159.04.txt"), smi.QUERY_FIELDS)
    d = only(smi.devices_from_rows(rows))
    assert smi.driver_from_rows(rows) == "580.159.04"
    assert (d.name, d.pci_bus_id, d.capability, d.pstate) == ("NVIDIA H200", "00000000:00:06.0", (9, 0), "P0")
    assert (d.memory_total_bytes, d.memory_used_bytes, d.memory_free_bytes) == (143771 * MIB, 0, 143156 * MIB)
    assert (d.power_draw_w, d.power_limit_w, d.temperature_c) == (82.92, 700.0, 39.0)
    assert (d.sm_clock_mhz, d.sm_clock_max_mhz, d.utilization_pct, d.clock_event_reasons) == (345.0, 1980.0, 0.0, 1)


def test_h200_query_gpu_with_units_and_header():
    rows = smi.parse_query_csv(raw("h200_query_gpu_units_header_580.159.04.txt"))
    assert list(rows[0]) == list(smi.QUERY_FIELDS)  # "clocks.current.sm [MHz]" is clocks.sm
    d = only(smi.devices_from_rows(rows))
    assert (d.memory_total_bytes, d.power_draw_w, d.sm_clock_mhz, d.utilization_pct) == (143771 * MIB, 82.96,
                                                                                          345.0, 0.0)


def test_h200_table_with_power_cap_memory_and_no_processes():
    t = smi.parse_table(raw("h200_table_580.159.04.txt"))
    assert t.header == smi.SmiHeader("580.159.04", "580.159.04", "13.0")
    d = only(t.devices)
    assert (d.name, d.power_draw_w, d.power_limit_w, d.temperature_c) == ("NVIDIA H200", 83.0, 700.0, 39.0)
    assert (d.memory_used_bytes, d.memory_total_bytes) == (0, 143771 * MIB)
    assert d.processes == []  # "No running processes found": known empty, not unknown


def test_h200_q_performance_idle_reason():
    q = smi.parse_q(raw("h200_q_performance_580.159.04.txt"))
    (g,) = q.gpus
    assert (q.driver_version, q.cuda_version, g.bus_id) == ("580.159.04", "13.0", "00000000:00:06.0")
    assert g.reasons_mask == 0x1 and set(g.counters_us.values()) == {0} and len(g.counters_us) == 5


@pytest.mark.parametrize(("printed", "why"), [
    ("[N/A]", Why.not_supported), ("N/A", Why.not_supported), ("[Not Supported]", Why.not_supported),
    ("Not Supported", Why.not_supported), ("[Insufficient Permissions]", Why.no_permission),
    ("[Unknown Error]", Why.error), ("[GPU requires reset]", Why.error), ("", Why.error),
])
def test_classify_missing_values(printed, why):
    got = smi.classify(printed)
    assert isinstance(got, Unavailable) and got.unavailable == why


@pytest.mark.parametrize(("printed", "value"), [("11.17 W", 11.17), ("2522 MHz", 2522.0), ("0 %", 0.0),
                                                ("42", 42.0), ("10W", 10.0)])
def test_number_drops_units(printed, value):
    assert smi.number(printed) == value


def test_header_aliases_and_comma_in_process_name():
    rows = smi.parse_query_csv("gpu_name, clocks_throttle_reasons.active\nNVIDIA GB10, 0x0000000000000020\n")
    assert rows == [{"name": "NVIDIA GB10", "clocks_event_reasons.active": "0x0000000000000020"}]
    (p,) = smi.parse_compute_apps("0000000F:01:00.0, 77, python train.py --a 1, --b 2, 512\n")
    assert (p.process.name, p.process.used_memory_bytes) == ("python train.py --a 1, --b 2", 512 * MIB)


def test_junk_rows_are_not_devices():
    rows = smi.parse_query_csv("x, \ufffd\ufffd, 0000000F:01:00.0\n1, NVIDIA GB10, not-a-bus\n",
                               ["index", "name", "pci.bus_id"])
    assert smi.devices_from_rows(rows) == []


def test_a_junk_line_read_as_a_header_makes_no_device():
    """Found by CI (1 run in ~300 of the /dev/urandom fake nvidia-smi): a random line such as ``junk_line`` passes as a
    csv header, and the lines after it became GPUs with no name and no bus id."""
    rows = smi.parse_query_csv("junk_line\n12\nzz\n", list(smi.QUERY_FIELDS))
    assert rows and smi.devices_from_rows(rows) == []


def test_messages():
    nodriver = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                "Make sure that the latest NVIDIA driver is installed and running.\n")
    assert smi.parse_host_error("\n" + nodriver) == nodriver.strip()
    assert smi.parse_host_error("No devices were found\n") == "No devices were found"
    assert smi.rejected_field('Field "clocks_event_reasons.active" is not a valid field to query.\n\n') == \
        "clocks_event_reasons.active"
    assert smi.rejected_field("0, NVIDIA GB10") is None


def test_bus_keys_compare_across_domain_widths():
    assert smi.bus_key("0000000F:01:00.0") == smi.bus_key("000F:01:00.0") == smi.bus_key("0000000f:01:00.0")
    assert smi.bus_key("garbage") is None


# --------------------------------------------------------------------------- properties
ALL_FIXTURE_LINES = sorted({line for p in RAW.iterdir() for line in p.read_text().splitlines()})
TOKENS = st.sampled_from(["[N/A]", "N/A", "[Not Supported]", "Not Supported", "11.17 W", "2522 MHz", "0 %", "P0",
                          "0x0000000000000020", "12.1", "NVIDIA GB10", "0000000F:01:00.0", "", " ", "|", "0x",
                          "-1", "1e9", "99999999999999999999", "[", "]", "\x00", "\ufffd", "MiB", "C"])
CELL = st.one_of(TOKENS, st.text(max_size=12))
CSV_TEXT = st.lists(st.lists(CELL, min_size=1, max_size=20).map(", ".join), max_size=6).map("\n".join)
TEXTISH = st.one_of(
    st.text(),
    CSV_TEXT,
    st.lists(st.one_of(st.sampled_from(ALL_FIXTURE_LINES), st.text(max_size=40)), max_size=30).map("\n".join),
)


@settings(max_examples=300, deadline=None)
@given(TEXTISH, st.one_of(st.none(), st.lists(st.sampled_from(smi.QUERY_FIELDS + smi.APP_FIELDS), max_size=16)))
def test_no_text_crashes_any_parser(text, fields):
    rows = smi.parse_query_csv(text, fields)
    for dev in smi.devices_from_rows(rows):
        assert isinstance(dev, GpuDevice)
    smi.driver_from_rows(rows)
    smi.parse_compute_apps(text)
    smi.parse_compute_apps(text, fields or smi.APP_FIELDS)
    table = smi.parse_table(text)
    assert all(isinstance(d, GpuDevice) for d in table.devices)
    smi.parse_header(text)
    q = smi.parse_q(text)
    for g in q.gpus:
        _ = g.reasons_mask
        assert all(isinstance(v, int) and v >= 0 for v in g.counters_us.values())
    smi.parse_host_error(text)
    smi.rejected_field(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_no_value_crashes_a_value_reader(value):
    for read in (smi.classify, smi.number, smi.mib_bytes, smi.bitmask, smi.capability, smi.bus_key,
                 smi.canonical_field):
        read(value)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 7),
    st.floats(0, 2000, allow_nan=False).map(lambda x: round(x, 2)),
    st.integers(0, 120),
    st.integers(0, 200_000),
    st.integers(0, 5000),
    st.sampled_from(["P0", "P2", "P8", "P12"]),
    st.integers(0, 0x1FF),
    st.booleans(),
)
def test_generated_rows_round_trip(index, power, temp, mem, clock, pstate, mask, units):
    values = {"index": str(index), "name": "NVIDIA GB10", "pci.bus_id": f"0000000F:0{index}:00.0",
              "driver_version": "580.95.05", "compute_cap": "12.1", "memory.total": f"{mem}",
              "memory.used": "[N/A]", "memory.free": "[N/A]", "power.draw": f"{power:.2f}", "power.limit": "[N/A]",
              "temperature.gpu": str(temp), "clocks.sm": str(clock), "clocks.max.sm": "3003",
              "utilization.gpu": "7", "pstate": pstate, "clocks_event_reasons.active": f"0x{mask:016x}"}
    if units:
        values["power.draw"] += " W"
        values["memory.total"] += " MiB"
        values["clocks.sm"] += " MHz"
    line = ", ".join(values[f] for f in smi.QUERY_FIELDS)
    d = only(smi.devices_from_rows(smi.parse_query_csv(line, smi.QUERY_FIELDS)))
    assert (d.index, d.power_draw_w, d.temperature_c, d.sm_clock_mhz) == (index, power, float(temp), float(clock))
    assert (d.memory_total_bytes, d.pstate, d.clock_event_reasons) == (mem * MIB, pstate, mask)
    assert not_supported(d.memory_used_bytes) and not_supported(d.power_limit_w)
