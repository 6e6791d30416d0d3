"""Start the appliance's own commands as separate processes, the way an operator would, and poll its status."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_udp_bound(port: int, timeout_s: float = 10.0) -> None:
    """Return once a socket is bound to 127.0.0.1:PORT (a receiver started in the background is listening), so a
    datagram sent to it from then on is not lost to a start-up race."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if f"0100007F:{port:04X}" in Path("/proc/net/udp").read_text():
            return
        time.sleep(0.01)
    raise AssertionError(f"nothing bound 127.0.0.1 port {port} within {timeout_s} s")


def appliance(*args: str, **kwargs: Any) -> subprocess.Popen:
    """Start ``appliance ARGS``; a ``run`` serves NTP and the web console on loopback at free ports unless the test
    says otherwise (test traffic stays on loopback, and tests must not fight over ports)."""
    extra: list[str] = []
    if args and args[0] == "run" and not any(a.startswith("ntp.") for a in args):
        extra = ["--set", "ntp.listen=127.0.0.1", "--set", f"ntp.port={free_udp_port()}", "--set", "ntp.workers=1"]
    if args and args[0] == "run" and not any(a.startswith("web.") for a in args):  # the console, on loopback too
        extra += ["--set", "web.listen=127.0.0.1", "--set", f"web.port={free_tcp_port()}"]
    proc = subprocess.Popen([sys.executable, "-m", "appliance", *args, *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, **kwargs)
    if args and args[0] == "run":
        state = next((a.split("=", 1)[1] for a in args if a.startswith("state_dir=")), None)
        if state is not None:
            _RUNS[str(Path(state))] = proc
    return proc


_RUNS: dict[str, subprocess.Popen] = {}  # the last ``appliance run`` started on each state directory


def status(state_dir: Path) -> dict[str, Any] | None:
    out = subprocess.run([sys.executable, "-m", "appliance", "status", "--json", "--set", f"state_dir={state_dir}"],
                         capture_output=True, text=True, env=ENV, timeout=20)
    return json.loads(out.stdout) if out.returncode == 0 else None


def wait_for(state_dir: Path, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    last = None
    run = _RUNS.get(str(Path(state_dir)))
    while time.monotonic() < deadline:
        last = status(state_dir)
        if last is not None and predicate(last):
            return last
        if last is None and run is not None and run.poll() is not None:  # gone: nothing to wait for
            raise AssertionError(f"the appliance on {state_dir} exited with {run.returncode} before the condition "
                                 f"was met: {(run.stderr.read() if run.stderr else '')[-2000:]}")
        time.sleep(0.3)
    raise AssertionError(f"condition not met within {timeout_s} s; last status: {json.dumps(last)[:2000]}")


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"process did not stop within {timeout_s} s after signal {sig}; stderr:\n{err}")
    return proc.returncode, err
