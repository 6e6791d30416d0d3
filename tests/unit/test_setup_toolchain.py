"""Installing without what the native data plane needs stops with a message naming the missing Debian package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build(cc: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CC": cc}
    return subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
                           "--build-temp", str(tmp_path / "tmp")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("cc, package", [
    ("/nonexistent/cc", "build-essential"),
    ("gcc -include /nonexistent/openssl/evp.h", "libssl-dev"),
    ("gcc -include /nonexistent/Python.h", "python3-dev"),
], ids=["no-compiler", "no-libssl", "no-python-headers"])
def test_a_missing_build_dependency_is_named(cc: str, package: str, tmp_path: Path) -> None:
    done = build(cc, tmp_path)
    assert done.returncode != 0
    assert package in done.stderr and "native data plane" in done.stderr
    assert not (tmp_path / "lib").exists()  # nothing half-built
