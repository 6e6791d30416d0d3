"""Run ``appliance run`` as a PTP grandmaster inside a test namespace, already holdover-capable, and read its status.

A learned clock state (the simulated OCXO of seed 1 runs 32 ppb slow) is written into the state directory first, so
the appliance restores it, locks within seconds and accepts ``holdover start`` at once instead of after minutes of
learning.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from appliance.clock.learned import LearnedState
from appliance.edge.persist import save_state
from harness.procs import ENV, status, stop, wait_for

FAST = ["--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3", "--set", "ntp.enabled=false",
        "--set", "sim.initial_clock_error_ns=0"]
SIM_OCXO_SEED1_CORRECTION_PPB = 32.02


def seed_learned_state(state_dir: Path) -> None:
    now_tai = time.time_ns() + 37 * 1_000_000_000
    save_state(state_dir, LearnedState(saved_at_tai_ns=now_tai, oscillator="ocxo", state="LOCKED",
                                       frequency_ppb=SIM_OCXO_SEED1_CORRECTION_PPB, frequency_sigma_ppb=0.05,
                                       aging_ppb_per_s=0.0, aging_sigma_ppb_per_s=1e-6, temp_coeff_ppb_per_k=None,
                                       error_bound_ns=50, locked_seconds=86_400))


class ApplianceGm:
    """``appliance run`` with PTP on ``iface`` inside namespace ``ns``; stopped on exit."""

    def __init__(self, ns: str, iface: str, state_dir: Path, *settings: str, learned: bool = True):
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        if learned:
            seed_learned_state(state_dir)
        argv = [sys.executable, "-m", "appliance", "run", "--set", f"ptp.interface={iface}",
                "--set", f"state_dir={state_dir}", *FAST]
        for s in settings:
            argv += ["--set", s]
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=ENV)
        self.err = ""

    def status(self) -> dict[str, Any] | None:
        return status(self.state_dir)

    def ptp(self) -> dict[str, Any]:
        s = self.status()
        assert s is not None, self.stderr()
        return s["outputs"]["ptp"]

    def wait(self, predicate: Any, timeout_s: float = 30.0) -> dict[str, Any]:
        if self.proc.poll() is not None:
            raise AssertionError(f"appliance exited: {self.stderr()}")
        return wait_for(self.state_dir, predicate, timeout_s)

    def identity(self) -> str:
        """Clock identity as ptp4l prints it (``aabbcc.fffe.ddeeff``)."""
        ptp = self.wait(lambda s: "port_identity" in s["outputs"]["ptp"], 15)["outputs"]["ptp"]
        return ptp["port_identity"].rsplit("-", 1)[0]

    def holdover(self, action: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "appliance", "holdover", action, "--set",
                               f"state_dir={self.state_dir}"], capture_output=True, text=True, env=ENV, timeout=20)

    def stderr(self) -> str:
        if self.proc.poll() is not None and not self.err:
            self.err = self.proc.stderr.read() if self.proc.stderr else ""
        return self.err[-4000:]

    def stop(self) -> str:
        if self.proc.poll() is None:
            _code, self.err = stop(self.proc)
        return self.err

    def __enter__(self) -> ApplianceGm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
