"""linuxptp 4.x (>= 4.3: PTP authentication, IEEE 1588-2019 16.14 / Annex P) for the interop tests.

The system's linuxptp is Debian 12's 3.1.1 (harness/ptp_harness.py drives it).  linuxptp 4.x comes from Debian
sid's binary package, unpacked with the libc and libnettle it needs beside the system's own by
``scripts/get-linuxptp4`` (which ``scripts/test-all`` runs, exporting the directory as ``LINUXPTP4_DIR``):
``ptp4l4() / "ptp4l"``, ``ptp4l4() / "pmc"``, ... run like any program.

A missing linuxptp 4.x skips the test locally and fails it under CI=true, as ``peers.require`` does for a missing
Debian peer.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from harness.missing import missing

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "get-linuxptp4"
DEFAULT_DIR = Path("/opt/appliance-test/linuxptp4")
MIN_VERSION = (4, 3)
PROVISION_TIMEOUT_S = 600

_found: dict[str, Path | str] = {}  # "dir" -> the directory, or "error" -> why there is none (asked once a run)


def version(directory: Path, program: str = "ptp4l") -> tuple[int, ...] | None:
    """``program -v`` of ``directory`` as (major, minor); None when it does not run."""
    try:
        out = subprocess.run([str(directory / program), "-v"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"\s*(\d+)\.(\d+)", out.stdout)
    return (int(m[1]), int(m[2])) if out.returncode == 0 and m else None


def _usable(directory: Path) -> bool:
    return all((v := version(directory, p)) is not None and v >= MIN_VERSION for p in ("ptp4l", "pmc"))


def _provision() -> Path | str:
    given = os.environ.get("LINUXPTP4_DIR")
    if given and _usable(Path(given)):
        return Path(given)
    target = Path(given) if given else DEFAULT_DIR
    try:
        out = subprocess.run([str(SCRIPT), str(target)], capture_output=True, text=True, timeout=PROVISION_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"scripts/get-linuxptp4 {target} did not run: {exc!r}"
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return f"scripts/get-linuxptp4 {target} exited {out.returncode}:\n{out.stderr[-3000:]}"
    directory = Path(lines[-1])
    if not _usable(directory):
        return f"scripts/get-linuxptp4 gave {directory}, whose ptp4l/pmc do not run as linuxptp >= 4.3"
    return directory


def ptp4l4() -> Path:
    """The directory holding linuxptp >= 4.3's ptp4l, pmc, phc2sys, ... (``LINUXPTP4_DIR``, else provisioned now
    by scripts/get-linuxptp4 into its default directory); skips the test locally and fails it under CI=true when
    there is none."""
    if not _found:
        found = _provision()
        _found["dir" if isinstance(found, Path) else "error"] = found
    if "dir" in _found:
        return _found["dir"]  # type: ignore[return-value]
    message = f"linuxptp >= 4.3 is not available (scripts/test-all provisions it as root): {_found['error']}"
    missing(message)


def requirements() -> Path:
    """What a linuxptp 4.x interop test needs: ``ptp4l4()``, root (namespaces) and ip, setpriv, tshark."""
    from harness import ptp_harness as h

    directory = ptp4l4()
    h.require_root()
    for tool in ("ip", "setpriv", "tshark"):
        h.require(tool)
    return directory
