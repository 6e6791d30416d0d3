"""The kernel's preemption mode, read from the most trusted place there is: the scheduler's debug file, the boot
command line, the build configuration, the build string; unknown when none says."""

from __future__ import annotations

import gzip
from pathlib import Path

from appliance.edge.kernel_preemption import preemption

NONE_BUILD = "#1 SMP PREEMPT_DYNAMIC Thu Jan  1 00:00:00 UTC 2026"


def _files(tmp_path: Path, debug: str | None = None, cmdline: str = "ro quiet",
           config: str | None = None) -> dict:
    paths = {"debug_file": str(tmp_path / "preempt"), "cmdline": str(tmp_path / "cmdline"),
             "configs": (str(tmp_path / "config.gz"), str(tmp_path / "missing"))}
    if debug is not None:
        (tmp_path / "preempt").write_text(debug)
    (tmp_path / "cmdline").write_text(cmdline)
    if config is not None:
        with gzip.open(tmp_path / "config.gz", "wt") as f:
            f.write(config)
    return paths


def test_the_schedulers_own_file_says_the_current_mode(tmp_path: Path) -> None:
    files = _files(tmp_path, debug="none voluntary (full) lazy\n", cmdline="preempt=none",
                   config="CONFIG_PREEMPT_NONE=y\n")
    assert preemption(**files, build=NONE_BUILD) == {"mode": "full", "from": files["debug_file"]}


def test_the_boot_command_line_then_the_build_configuration(tmp_path: Path) -> None:
    files = _files(tmp_path, cmdline="root=/dev/vda preempt=full quiet", config="CONFIG_PREEMPT_NONE=y\n")
    assert preemption(**files, build=NONE_BUILD)["mode"] == "full"
    files = _files(tmp_path, cmdline="root=/dev/vda", config="CONFIG_PREEMPT_BUILD=y\nCONFIG_PREEMPT_NONE=y\n"
                                                             "CONFIG_PREEMPT_DYNAMIC=y\nCONFIG_PREEMPTION=y\n")
    assert preemption(**files, build=NONE_BUILD) == {"mode": "none", "from": files["configs"][0]}
    files = _files(tmp_path, config="# CONFIG_PREEMPT_NONE is not set\nCONFIG_PREEMPT_VOLUNTARY=y\n")
    assert preemption(**files, build=NONE_BUILD)["mode"] == "voluntary"


def test_the_build_string_when_nothing_else_is_readable(tmp_path: Path) -> None:
    files = _files(tmp_path)
    assert preemption(**files, build="#1 SMP PREEMPT_RT Thu Jan  1 00:00:00 UTC 2026") == {
        "mode": "rt", "from": "uname -v"}
    assert preemption(**files, build="#1 SMP PREEMPT Thu Jan  1 00:00:00 UTC 2026")["mode"] == "full"
    assert preemption(**files, build=NONE_BUILD) == {"mode": "unknown", "from": "none readable"}


def test_garbage_is_not_a_mode(tmp_path: Path) -> None:
    """A word the kernel does not use, or a config file that is not gzip, is passed over."""
    files = _files(tmp_path, debug="(turbo)\n", cmdline="preempt=fastest")
    (tmp_path / "config.gz").write_text("not gzip")
    assert preemption(**files, build=NONE_BUILD)["mode"] == "unknown"
