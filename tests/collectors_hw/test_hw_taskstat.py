"""The shared procfs readers: whole large seq_files, fast one-record files, parsed fields."""

from __future__ import annotations

import os
from pathlib import Path

from wp_mcp.collectors.taskstat import parse_stat, read_small, read_switches, read_text


def test_read_text_returns_all_of_a_large_file(tmp_path: Path):
    blob = "".join(f"line {i}\n" for i in range(40_000))  # ~360 KB, several read() calls
    (tmp_path / "big").write_text(blob)
    assert read_text(tmp_path / "big") == blob


def test_read_text_returns_all_of_a_seq_file_that_reads_a_page_at_a_time():
    maps = read_text(f"/proc/{os.getpid()}/maps")
    assert maps is not None and len(maps) > 8192  # a Python process maps far more than a page
    assert maps.endswith("\n") and len(maps.splitlines()) > 50


def test_missing_files_read_as_none():
    assert read_text("/proc/0/nothing") is None and read_small("/proc/0/stat") is None


def test_stat_with_spaces_and_parentheses_in_the_name():
    fields = (
        ["S", "1"]
        + ["0"] * 7
        + ["12", "0", "300", "200"]
        + ["0"] * 6
        + ["777"]
        + ["0"] * 16
        + ["5"]
    )
    stat = parse_stat("42 (my (odd) name) " + " ".join(fields) + "\n")
    assert stat.comm == "my (odd) name" and stat.state == "S" and stat.ppid == 1
    assert stat.major_faults == 12 and stat.start_ticks == 777 and stat.last_cpu == 5
    assert stat.cpu_time_s == 500 / os.sysconf("SC_CLK_TCK")


def test_switch_counts_from_status():
    assert read_switches(f"/proc/{os.getpid()}/status") is not None
