"""Fuzzing, surface by surface: cases tried and failures of every parser fuzz test, at the suite's budget or a larger one.

    python bench/fuzz.py [--examples N] [--random] [-k EXPR]

Runs the fuzz tests (``tests/props/test_fuzz_*.py``, the stream and codec fuzzers ``test_gnss_fuzz.py`` and
``test_ptp_codec_props.py``, and the REST API's ``tests/web/test_fuzz_rest.py``) in this process, serially, and counts
every case hypothesis runs through a test as it reports it (its observability callback): per surface the tests, the
cases tried, the cases that failed a contract, the tests that failed, the seconds spent and cases per second.

Reference (the same run): the budget each test asks for (``tests/props/fuzzing.py``: ``APPLIANCE_FUZZ_EXAMPLES``
examples per test, 300 by default, times the test's scale).  ``tried / budget`` is near 1 when hypothesis generated
the whole budget; above 1 while it shrinks a failure; below 1 when a test's input space ran out first.  The SNMP and
REST tests run their ``@given`` inside the test (the agent and the console are built once per test), where the
budget is not visible from outside: their budget shows as 0 and the ratio as "-".  Any failure
makes the exit status 1 and is printed by pytest above the table with the input that reproduces it.

``--examples 20000`` (a long run on a developer's machine) and ``--random`` (new examples each run, the example
database on: a failure is replayed first next time) are the two knobs of ``fuzzing.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FILES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "props").glob("test_fuzz_*.py")) + [
    "tests/props/test_gnss_fuzz.py", "tests/props/test_ptp_codec_props.py", "tests/web/test_fuzz_rest.py"]
SURFACES = {"test_fuzz_ntp": "NTP packet, MAC, keys, server, poller", "test_fuzz_ptp": "PTP port, slave, TLVs",
            "test_ptp_codec_props": "PTP codec", "test_fuzz_gnss": "NMEA/UBX from captures",
            "test_gnss_fuzz": "NMEA/UBX streams", "test_fuzz_irig": "IRIG-B edges, samples, WAV",
            "test_fuzz_config": "TOML config", "test_fuzz_control": "control socket", "test_fuzz_leap": "leap file",
            "test_fuzz_audit_bundle": "audit bundle", "test_fuzz_audit_anchor": "audit collector log",
            "test_fuzz_ntske_hello": "NTS-KE ClientHello (ALPN)", "test_fuzz_snmp": "SNMP through the agent",
            "test_fuzz_rest": "REST API bodies and queries"}


@dataclass
class Tally:
    tests: int = 0
    budget: int = 0
    tried: int = 0
    failing_cases: int = 0
    failed_tests: int = 0
    seconds: float = 0.0


class Counter:
    """A pytest plugin: which surface is running, and per surface what hypothesis reports of each case."""

    def __init__(self) -> None:
        self.tallies: dict[str, Tally] = defaultdict(Tally)
        self.current: str | None = None

    def observe(self, observation: Any, *_thread: Any) -> None:
        if getattr(observation, "type", None) != "test_case" or self.current is None:
            return
        tally = self.tallies[self.current]
        tally.tried += 1
        tally.failing_cases += observation.status == "failed"

    def pytest_configure(self, config: Any) -> None:
        from hypothesis.internal import observability  # once pytest has set up (its assertion rewriting first)

        observability.add_observability_callback(self.observe, all_threads=True)

    def pytest_runtest_setup(self, item: Any) -> None:
        self.current = SURFACES.get(Path(str(item.fspath)).stem, Path(str(item.fspath)).stem)
        tally = self.tallies[self.current]
        tally.tests += 1
        settings = getattr(getattr(item, "function", None), "_hypothesis_internal_use_settings", None)
        tally.budget += settings.max_examples if settings is not None and _is_given(item) else 0

    def pytest_runtest_logreport(self, report: Any) -> None:
        if self.current is None:
            return
        tally = self.tallies[self.current]
        tally.seconds += report.duration
        tally.failed_tests += report.failed and report.when == "call"


def _is_given(item: Any) -> bool:
    return bool(getattr(getattr(item, "function", None), "is_hypothesis_test", False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--examples", type=int, default=None, help="examples per test (default: the suite's 300)")
    parser.add_argument("--random", action="store_true", help="new examples each run (default: the fixed ones)")
    parser.add_argument("-k", default=None, help="only the tests pytest's -k expression selects")
    args = parser.parse_args()
    if args.examples is not None:
        os.environ["APPLIANCE_FUZZ_EXAMPLES"] = str(args.examples)
    if args.random:
        os.environ["APPLIANCE_FUZZ_RANDOM"] = "1"
    os.chdir(ROOT)

    import pytest

    counter = Counter()
    started = time.perf_counter()
    pytest_args = ["-q", "-n", "0", "-p", "no:cacheprovider", "-o", "addopts=", *[f for f in FILES
                                                                                  if (ROOT / f).exists()]]
    if args.k:
        pytest_args += ["-k", args.k]
    code = pytest.main(pytest_args, plugins=[counter])
    wall_s = time.perf_counter() - started

    print(f"\nfuzz budget: {os.environ.get('APPLIANCE_FUZZ_EXAMPLES', '300')} examples per test (times its scale), "
          f"{'random' if args.random else 'fixed (derandomized)'} examples")
    header = f"{'surface':<38} {'tests':>5} {'budget':>7} {'tried':>7} {'tried/budget':>12} {'failing':>7} " \
             f"{'failed':>6} {'s':>7} {'cases/s':>8}"
    print(header)
    print("-" * len(header))
    total = Tally()
    for surface, t in sorted(counter.tallies.items()):
        ratio = f"{t.tried / t.budget:.2f}" if t.budget else "-"
        rate = t.tried / t.seconds if t.seconds else 0.0
        print(f"{surface:<38} {t.tests:>5} {t.budget:>7} {t.tried:>7} {ratio:>12} {t.failing_cases:>7} "
              f"{t.failed_tests:>6} {t.seconds:>7.1f} {rate:>8.0f}")
        for name in ("tests", "budget", "tried", "failing_cases", "failed_tests"):
            setattr(total, name, getattr(total, name) + getattr(t, name))
        total.seconds += t.seconds
    print("-" * len(header))
    ratio = f"{total.tried / total.budget:.2f}" if total.budget else "-"
    print(f"{'all':<38} {total.tests:>5} {total.budget:>7} {total.tried:>7} {ratio:>12} {total.failing_cases:>7} "
          f"{total.failed_tests:>6} {total.seconds:>7.1f} {total.tried / max(total.seconds, 1e-9):>8.0f}")
    print(f"wall {wall_s:.1f} s; pytest exit status {int(code)}")
    return 0 if int(code) == 0 and total.failed_tests == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
