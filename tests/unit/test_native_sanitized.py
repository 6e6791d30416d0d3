"""The native data plane built once more with AddressSanitizer and UndefinedBehaviorSanitizer, and its fuzz and
differential tests run against that build.

A memory error (an overflow, a use after free) or undefined behaviour (a signed overflow, a misaligned load, a shift
too far) in ``_fastpath.c``, ``_auth.c``, ``_nts.c``, ``_syncsend.c`` or the shared ``protocol/native`` pieces stops the run with the sanitizer's report,
where the ordinary build might answer on with a corrupted reply.  The product's tree is copied without its built
extensions, built with the sanitizers through setup.py's ``APPLIANCE_CFLAGS``/``APPLIANCE_LDFLAGS``, and the tests
below run in a Python whose first loaded library is the AddressSanitizer runtime (``LD_PRELOAD``: the interpreter
itself is not instrumented).  Leak detection is off: the interpreter keeps memory to its exit by design.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SANITIZE = "-fsanitize=address,undefined"
CFLAGS = f"{SANITIZE} -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
TESTS = ["tests/props/test_fuzz_ntp.py::test_the_data_plane_drops_and_answers_as_its_model",
         "tests/unit/test_nts_fastpath.py", "tests/unit/test_nts_uid.py", "tests/unit/test_native_sync_sender.py",
         "tests/unit/test_native_delay_resp.py", "tests/props/test_limits_native.py", "tests/unit/test_ntp_clockmap.py",
         "tests/unit/test_ptp_lateness.py", "tests/unit/test_native_signing.py"]
IGNORED = shutil.ignore_patterns("__pycache__", "*.so", "*.o", ".hypothesis", ".pytest_cache")


def runtime(name: str) -> str:
    path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True).stdout
    return path.strip()


@pytest.fixture(scope="module")
def sanitized_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("sanitized")
    for part in ("appliance", "tests", "harness"):
        shutil.copytree(ROOT / part, tree / part, ignore=IGNORED)
    for part in ("setup.py", "pyproject.toml"):
        shutil.copy2(ROOT / part, tree / part)
    env = {**os.environ, "APPLIANCE_CFLAGS": CFLAGS, "APPLIANCE_LDFLAGS": SANITIZE}
    built = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, env=env,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    for ext in ("appliance/edge/ntp/_fastpath", "appliance/edge/ptp/_syncsend", "appliance/protocol/dataplane"):
        (so,) = tree.glob(f"{ext}.*.so")
        linked = subprocess.run(["ldd", str(so)], capture_output=True, text=True, check=True).stdout
        assert "libasan" in linked and "libubsan" in linked, f"{so.name} was not built with the sanitizers"
    return tree


def test_fuzz_and_differential_tests_pass_under_the_sanitizers(sanitized_tree: Path) -> None:
    env = {**os.environ, "LD_PRELOAD": runtime("libasan.so"), "PYTHONPATH": str(sanitized_tree),
           "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:halt_on_error=1:detect_stack_use_after_return=0",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
           "APPLIANCE_FUZZ_EXAMPLES": os.environ.get("APPLIANCE_FUZZ_EXAMPLES", "300")}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *TESTS],
                          cwd=sanitized_tree, env=env, capture_output=True, text=True, timeout=900)
    report = done.stdout[-4000:] + done.stderr[-6000:]
    assert "ERROR: AddressSanitizer" not in report and "runtime error:" not in report, report
    assert done.returncode == 0, report
    assert " passed" in done.stdout and " failed" not in done.stdout, report
    import appliance.edge.ntp._fastpath as ordinary

    assert Path(ordinary.__file__).resolve().parent == ROOT / "appliance/edge/ntp"  # this process kept its build
