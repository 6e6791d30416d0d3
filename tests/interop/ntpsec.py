"""NTPsec's ntpd (an NTS client since 1.2) for the interop tests, unpacked from Debian 12's own package beside the
system, never installed: Debian's ntpsec conflicts with chrony (both provide time-daemon) and would start as a
service that disciplines the clock.  ``apt-get download ntpsec`` (after ``apt-get update`` when the lists are
missing) and ``dpkg-deb -x`` into ``NTPSEC_DIR`` (default /opt/appliance-test/ntpsec), once; ``ntpd()`` is the
unpacked binary.  A missing ntpd skips the test locally and fails it under CI=true.
"""

from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path

from harness.missing import missing

DEFAULT_DIR = Path("/opt/appliance-test/ntpsec")
_found: dict[str, Path | str] = {}


def _run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)


def _provision(directory: Path) -> Path | str:
    binary = directory / "root" / "usr" / "sbin" / "ntpd"
    if binary.exists() and _run(str(binary), "--version").returncode == 0:
        return binary
    if os.geteuid() != 0:
        return f"{binary} is missing and provisioning it needs root"
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)  # apt's _apt user downloads into it
    got = _run("apt-get", "download", "ntpsec", cwd=directory)
    if got.returncode != 0:
        _run("apt-get", "update", "-qq")
        got = _run("apt-get", "download", "ntpsec", cwd=directory)
    debs = sorted(glob.glob(str(directory / "ntpsec_*.deb")))
    if got.returncode != 0 or not debs:
        return f"apt-get download ntpsec failed: {got.stderr[-2000:]}"
    unpacked = _run("dpkg-deb", "-x", debs[-1], str(directory / "root"))
    if unpacked.returncode != 0:
        return f"dpkg-deb -x {debs[-1]} failed: {unpacked.stderr[-2000:]}"
    version = _run(str(binary), "--version")
    if version.returncode != 0:
        return f"{binary} does not run: {version.stderr[-2000:]}"
    return binary


def ntpd() -> Path:
    """NTPsec's ntpd, unpacked; skips locally and fails under CI=true when it cannot be had."""
    if not _found:
        found = _provision(Path(os.environ.get("NTPSEC_DIR", str(DEFAULT_DIR))))
        _found["ntpd" if isinstance(found, Path) else "error"] = found
    if "ntpd" in _found:
        return _found["ntpd"]  # type: ignore[return-value]
    message = f"NTPsec's ntpd is not available: {_found['error']}"
    missing(message)
