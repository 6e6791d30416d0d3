"""Unit tests of the system page's readers (appliance.edge.procstats): /proc/<pid>/stat and status parsed from
sample text, CPU percentages, the sampler on real and made-up processes, and the state directory's disk use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.edge.procstats import (DiskUse, ProcessSampler, cpu_percent, disk_use, parse_stat,
                                      parse_status_kib)

# proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
# priority nice num_threads itrealvalue starttime vsize rss ...
STAT = ("4242 (ntp (worker) 0) S 4200 4200 2929 0 -1 4194304 97 0 0 0 1234 566 7 8 20 0 3 0 1018211 3133440 380 "
        "18446744073709551615 94394765180928 94394765200809 140730551849712 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
STATUS = """Name:\tpython
Umask:\t0022
State:\tS (sleeping)
Pid:\t4242
VmPeak:\t  412000 kB
VmSize:\t  410000 kB
VmHWM:\t   61234 kB
VmRSS:\t   50210 kB
RssAnon:\t   40000 kB
Threads:\t3
voluntary_ctxt_switches:\t150
"""


def test_stat_fields_are_counted_from_the_last_parenthesis() -> None:
    stat = parse_stat(STAT)
    assert stat.pid == 4242 and stat.name == "ntp (worker) 0" and stat.state == "S"
    assert stat.cpu_ticks == 1234 + 566  # utime + stime; the children's (cutime, cstime) are not ours
    assert stat.threads == 3 and stat.start_ticks == 1018211


def test_status_kib_figures() -> None:
    kib = parse_status_kib(STATUS)
    assert kib["VmRSS"] == 50210 and kib["VmHWM"] == 61234 and kib["RssAnon"] == 40000
    assert "Threads" not in kib and "Name" not in kib


def test_cpu_percent_of_one_core() -> None:
    assert cpu_percent(100, 150, 1_000_000_000, 100) == pytest.approx(50.0)
    assert cpu_percent(100, 500, 2_000_000_000, 100) == pytest.approx(200.0)  # two cores busy
    assert cpu_percent(100, 100, 0, 100) is None
    assert cpu_percent(200, 100, 1_000_000_000, 100) is None  # not the same process


def write_process(proc: Path, pid: int, stat: str, status: str = STATUS) -> None:
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "stat").write_text(stat)
    (proc / str(pid) / "status").write_text(status)


def test_sampler_gives_a_percentage_from_the_second_look_and_forgets_a_reused_pid(tmp_path: Path) -> None:
    sampler = ProcessSampler(tmp_path, min_interval_ns=0)
    write_process(tmp_path, 4242, STAT)
    first = sampler.sample(4242)
    assert first is not None and first["cpu_percent"] is None
    assert first["cpu_s"] == round(1800 / sampler.ticks_per_s, 2)
    assert first["rss_bytes"] == 50210 * 1024 and first["peak_rss_bytes"] == 61234 * 1024 and first["threads"] == 3
    write_process(tmp_path, 4242, STAT.replace(" 1234 566 ", " 1334 566 "))
    second = sampler.sample(4242)
    assert second is not None and second["cpu_percent"] is not None and second["cpu_percent"] > 0
    write_process(tmp_path, 4242, STAT.replace(" 1018211 ", " 2000000 "))  # another process under the same pid
    assert sampler.sample(4242)["cpu_percent"] is None  # type: ignore[index]
    assert sampler.sample(4343) is None  # no such process


def test_sampler_on_this_very_process() -> None:
    sampler = ProcessSampler()
    me = sampler.sample(os.getpid())
    assert me is not None and me["pid"] == os.getpid() and me["rss_bytes"] > 1_000_000 and me["threads"] >= 1


def test_disk_use_names_the_biggest_items_and_sums_the_rest(tmp_path: Path) -> None:
    (tmp_path / "audit.sqlite").write_bytes(b"a" * 40_000)
    (tmp_path / "audit.sqlite-wal").write_bytes(b"w" * 9_000)  # companions: counted with the database
    (tmp_path / "audit.sqlite.head").write_bytes(b"h" * 1_000)
    (tmp_path / "quality.sqlite").write_bytes(b"q" * 30_000)
    (tmp_path / "nts").mkdir()
    (tmp_path / "nts" / "cookie_keys.json").write_bytes(b"k" * 1_000)
    (tmp_path / "nts" / "deep").mkdir()
    (tmp_path / "nts" / "deep" / "cert.pem").write_bytes(b"c" * 2_000)
    for i in range(3):
        (tmp_path / f"small{i}").write_bytes(b"s" * (10 + i))
    (tmp_path / "link").symlink_to("/usr")  # not followed
    use = disk_use(tmp_path, biggest=3)
    assert use["bytes"] == 50_000 + 30_000 + 3_000 + 33 + len("/usr")
    assert use["items"][:3] == [{"name": "audit.sqlite", "bytes": 50_000}, {"name": "quality.sqlite", "bytes": 30_000},
                                {"name": "nts/", "bytes": 3_000}]
    assert use["items"][3] == {"name": "4 other items", "bytes": 33 + len("/usr")}
    assert use["complete"] and use["path"] == str(tmp_path)
    assert 0 < use["free_bytes"] <= use["filesystem_bytes"]


def test_disk_use_walk_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "many").mkdir()
    for i in range(50):
        (tmp_path / "many" / f"f{i}").write_bytes(b"x")
    use = disk_use(tmp_path, max_entries=10)
    assert not use["complete"] and use["bytes"] < 50


def test_disk_use_of_a_missing_directory_says_why(tmp_path: Path) -> None:
    assert "error" in disk_use(tmp_path / "nowhere")
    cached = DiskUse(tmp_path, cache_s=60.0)
    first = cached.get()
    (tmp_path / "new").write_bytes(b"n" * 100)
    assert cached.get() is first  # walked once within the cache time


def test_a_look_too_soon_after_the_last_gives_the_last_figure(tmp_path: Path) -> None:
    sampler = ProcessSampler(tmp_path, min_interval_ns=3_600 * 10**9)
    write_process(tmp_path, 4242, STAT)
    assert sampler.sample(4242)["cpu_percent"] is None  # type: ignore[index]
    write_process(tmp_path, 4242, STAT.replace(" 1234 566 ", " 1334 566 "))
    again = sampler.sample(4242)
    assert again is not None and again["cpu_percent"] is None  # no figure over a few microseconds of ticks
    assert again["cpu_s"] == round(1900 / sampler.ticks_per_s, 2)
