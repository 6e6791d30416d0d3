"""The suite on several CPUs (pytest-xdist: ``scripts/test-all`` runs ``-n 3``).

Tests against real peers wait on the host's real time and share its packages' daemons, so each runs in one of two
groups whose tests go to one worker, one after the other, as without xdist:

- ``peers-timing``: what measures timing against a real peer over the network (NTP clients and servers, PTP masters
  and slaves, SNMP managers, the browser, the appliance switching between ptp4l and chronyd references);
- ``peers-appliance``: ``appliance run`` and its command line on the simulated world (lock, holdover, restarts,
  integrity drills, time outputs, IRIG-B input, audit durability), which checks the simulation's own truth and waits
  on its seconds.

The two groups run beside each other.  The pure tests (unit, property, replay, simulation, the console through
Flask's test client) use no real time and nothing shared; each is a work unit of its own for whichever worker is
free, at a low CPU priority (nice 10), so a peer test that needs the CPU gets it at once.  The grouping is a
scheduler of our own (``pytest_xdist_make_scheduler``): xdist's ``loadgroup`` marks a group through the test's node
id, which pytest 9 no longer lets a plugin change.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

APPLIANCE_RUN = {"test_audit_durability.py", "test_cli_run.py", "test_clock_run.py", "test_fleet_monitoring.py",
                 "test_backup_restore.py", "test_integrity_drill.py", "test_external_auth.py",
                 "test_operator_delay.py", "test_receiver_device.py",
                 "test_irig_input_run.py", "test_irig_loopback.py", "test_serial_pty.py", "test_time_outputs.py"}
PURE_NICE = 10  # about a tenth of a CPU against a busy peer test: pure tests with a thread and a timeout still finish
WORKER_NICE = os.getpriority(os.PRIO_PROCESS, 0)  # the worker's own, as it started


def group_of(nodeid: str) -> str | None:
    """The serial group of a test against real peers, from its node id (``tests/interop/test_x.py::test_y``);
    None for a pure test."""
    path = nodeid.split("::", 1)[0]
    if path == "tests/web/test_browser.py":
        return "peers-timing"
    if not path.startswith("tests/interop/"):
        return None
    return "peers-appliance" if path.rsplit("/", 1)[-1] in APPLIANCE_RUN else "peers-timing"


if importlib.util.find_spec("xdist") is not None:
    from xdist.scheduler import LoadScopeScheduling

    class PeerGroups(LoadScopeScheduling):
        """xdist's scope scheduling with our scopes: a group of peer tests, or a single pure test."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> PeerGroups:
        return PeerGroups(config, log)


@pytest.fixture(autouse=True)
def _cpu_priority(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under xdist, a pure test runs at nice 10 (this thread and what it starts); a peer test at the worker's own."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    wanted = WORKER_NICE if group_of(request.node.nodeid) is not None else PURE_NICE
    try:
        os.setpriority(os.PRIO_PROCESS, 0, wanted)
    except PermissionError:  # not root: a niceness cannot be lowered again; the peer tests then share it
        pass
    yield
