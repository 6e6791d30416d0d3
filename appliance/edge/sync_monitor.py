"""Poll the sync monitor's downstream clients: NTP hosts by client-mode exchanges, PTP slaves through linuxptp's nsm.

I/O edge: a daemon thread polls every target once per interval, reads the host clock around each exchange and turns
it into served time (``served_tai_ns_at_host``), and hands each result (``monitor.Answer``) to ``on_answer`` (called
on the thread: wrap it with ``loop.call_soon_threadsafe``).  The arithmetic and every decision are in the core
(``appliance/monitor.py``).  A failed poll is an answer with its reason, never an exception.

nsm (linuxptp's NetSync Monitor client) runs as one child process for all PTP targets: it reads ``NSM <address>``
commands on its standard input, sends a Delay_Req carrying the NSM TLV to that address and prints the slave's
answer as a block on its standard output.  It has one request outstanding at a time and its report does not name
the target, so targets are asked one after the other, each within the timeout.  A dead nsm is started again at
the next poll; a missing program is reported as each PTP target's error (and logged once).
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from appliance.monitor import Answer, NsmParser, NsmReport, Target, failed, nsm_answer, ntp_answer, ntp_request

log = logging.getLogger("appliance.monitor")
_NSM_START_S = 0.3  # nsm opens its sockets this soon after it starts; a request before that is lost
_MAX_REPLY = 1024


class NsmProcess:
    """linuxptp's ``nsm`` as a child process with a pipe to its standard input and a reader of its output."""

    def __init__(self, program: str, interface: str, transport: str = "udp4", domain: int = 0,
                 timestamping: str = "software"):
        self.program, self.interface = program, interface
        self._config = (f"[global]\nnetwork_transport {'L2' if transport == 'l2' else 'UDPv4'}\n"
                        f"domainNumber {domain}\ntime_stamping {timestamping}\nlogging_level 6\n"
                        # a loaded host can take more than the default 1 ms to hand back a transmit timestamp
                        "tx_timestamp_timeout 20\n")
        self._proc: subprocess.Popen[str] | None = None
        self._reports: queue.Queue[NsmReport] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=20)
        self._said = 0  # lines nsm wrote on its standard error so far
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.starts = 0
        self.error = ""
        self._missing_logged = False

    def measure(self, address: str, timeout_s: float) -> NsmReport | str:
        """Ask nsm to measure one slave; its report, or why there is none."""
        problem = self._ensure_running()
        if problem:
            return problem
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        while not self._reports.empty():  # a late report of an earlier request belongs to no one now
            self._reports.get_nowait()
        said_before = self._said
        try:
            proc.stdin.write(f"NSM {address}\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            return f"nsm: cannot send the request: {exc}"
        try:
            return self._reports.get(timeout=timeout_s)
        except queue.Empty:
            if proc.poll() is not None:
                return self._exited(proc)
            said = list(self._stderr)[-min(self._said - said_before, len(self._stderr)):] \
                if self._said > said_before else []
            return f"no NSM answer within {timeout_s:g} s" + (f" (nsm: {'; '.join(said)[-200:]})" if said else "")

    def _ensure_running(self) -> str:
        if self._proc is not None and self._proc.poll() is None:
            return ""
        if self._proc is not None:
            log.warning("sync monitor: %s; starting it again", self._exited(self._proc))
        path = shutil.which(self.program) or (self.program if os.path.isfile(self.program) else None)
        if path is None:
            self.error = (f"nsm program {self.program!r} not found (monitor.nsm_path; Debian's linuxptp package "
                          "installs /usr/sbin/nsm)")
            if not self._missing_logged:
                log.error("sync monitor: %s", self.error)
                self._missing_logged = True
            return self.error
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="appliance-nsm-")
        config = Path(self._dir.name) / "nsm.cfg"
        config.write_text(self._config, encoding="ascii")
        from appliance.edge.proc import die_with_parent

        try:
            self._proc = subprocess.Popen([path, "-f", str(config), "-i", self.interface], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                                          preexec_fn=die_with_parent)
        except OSError as exc:
            self.error = f"nsm cannot start: {exc}"
            return self.error
        self.starts += 1
        self.error = ""
        assert self._proc.stdout is not None and self._proc.stderr is not None
        threading.Thread(target=self._read_reports, args=(self._proc.stdout,), name="nsm-out", daemon=True).start()
        threading.Thread(target=self._read_errors, args=(self._proc.stderr,), name="nsm-err", daemon=True).start()
        time.sleep(_NSM_START_S)
        if self._proc.poll() is not None:
            time.sleep(0.1)  # let the reader take its last words
            self.error = self._exited(self._proc)
            return self.error
        return ""

    def _exited(self, proc: subprocess.Popen[str]) -> str:
        said = "; ".join(line for line in self._stderr if line)[-300:]
        return f"nsm exited with status {proc.returncode}" + (f": {said}" if said else "")

    def _read_reports(self, stream: TextIO) -> None:
        parser = NsmParser()
        for line in stream:
            report = parser.feed(line)
            if report is not None:
                self._reports.put(report)
            elif line.strip() and not line.startswith(("\t", " ", "NSM")):
                log.debug("nsm: %s", line.rstrip())

    def _read_errors(self, stream: TextIO) -> None:
        for line in stream:
            self._stderr.append(line.strip())
            self._said += 1
            log.debug("nsm: %s", line.rstrip())

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(2.0)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


class SyncMonitorPoller:
    """Polls every target once per ``interval_s`` from a daemon thread."""

    def __init__(self, targets: Sequence[Target], interval_s: float, timeout_s: float,
                 served_tai_ns_at_host: Callable[[int], int], posix_of_tai: Callable[[int], int],
                 on_answer: Callable[[Answer], None], nsm: NsmProcess | None = None):
        if interval_s <= 0 or timeout_s <= 0:
            raise ValueError("interval_s and timeout_s must be positive")
        self.targets, self.interval_s, self.timeout_s = tuple(targets), interval_s, timeout_s
        self._served_tai, self._posix_of = served_tai_ns_at_host, posix_of_tai
        self._on_answer, self.nsm = on_answer, nsm
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("SyncMonitorPoller already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="syncmonitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s * 2 + 3.0)
            if not self._thread.is_alive():
                self._thread = None
        if self.nsm is not None:
            self.nsm.stop()

    def status(self) -> dict[str, Any]:
        """The poller's own report (the targets' results are in the read model's ``monitor`` rows)."""
        nsm = self.nsm
        return {"sync_monitor": {"state": "running" if self._thread is not None else "stopped",
                                 "rounds": self.rounds, "targets": len(self.targets),
                                 "nsm_starts": None if nsm is None else nsm.starts,
                                 "nsm_error": None if nsm is None else nsm.error}}

    def _run(self) -> None:
        # A fixed monotonic schedule; a round that overran is followed by the next only after a full interval, so a
        # target never sees a burst of catch-up requests.
        while not self._stop.is_set():
            started_s = time.monotonic()
            try:
                self.poll_once()
            except Exception:  # a bug here must not end the monitor for good
                log.exception("sync monitor poll failed")
            self._stop.wait(max(0.0, started_s + self.interval_s - time.monotonic()))

    def poll_once(self) -> list[Answer]:
        answers = []
        for target in self.targets:
            if self._stop.is_set():
                break
            answer = self._ntp(target) if target.kind == "ntp" else self._ptp(target)
            answers.append(answer)
            try:
                self._on_answer(answer)
            except Exception:
                log.exception("sync monitor: handling the answer of %s failed", target.name)
        self.rounds += 1
        return answers

    # --- NTP ----------------------------------------------------------------------------------------------------
    def _served_posix(self, host_ns: int) -> tuple[int, int]:
        tai = self._served_tai(host_ns)
        return tai, self._posix_of(tai)

    def _ntp(self, target: Target) -> Answer:
        try:
            family, _, _, _, address = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_DGRAM)[0]
        except (OSError, UnicodeError) as exc:
            return failed(target.name, self._served_tai(time.time_ns()), f"cannot resolve {target.host}: {exc}")
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(address)  # replies from anyone else are not delivered
            request, xmt = ntp_request(self._served_posix(time.time_ns())[1])
            deadline = time.monotonic() + self.timeout_s
            try:
                # T1 and T4 are host clock readings right at the send and the receipt, turned into served time only
                # afterwards: the conversion's own cost (and a wait for the interpreter lock) stays out of the
                # exchange.  The transmit timestamp sent is only echoed back, so it need not be T1 itself.
                t1_host = time.time_ns()
                sock.send(request)
                while True:
                    sock.settimeout(max(0.001, deadline - time.monotonic()))
                    reply = sock.recv(_MAX_REPLY)
                    t4_host = time.time_ns()
                    t1 = self._served_posix(t1_host)[1]
                    at_tai, t4 = self._served_posix(t4_host)
                    answer = ntp_answer(target.name, reply, xmt, t1, t4, at_tai)
                    if answer.error != "reply does not echo our request's transmit timestamp" \
                            or time.monotonic() >= deadline:
                        return answer
            except TimeoutError:
                return failed(target.name, self._served_tai(time.time_ns()),
                              f"no NTP answer within {self.timeout_s:g} s")
            except OSError as exc:  # refused (ICMP port unreachable), no route
                return failed(target.name, self._served_tai(time.time_ns()), f"{type(exc).__name__}: {exc}")

    # --- PTP ----------------------------------------------------------------------------------------------------
    def _ptp(self, target: Target) -> Answer:
        if self.nsm is None:
            return failed(target.name, self._served_tai(time.time_ns()), "no nsm configured")
        report = self.nsm.measure(target.host, self.timeout_s)
        host_ns = time.time_ns()
        at_tai, served_posix = self._served_posix(host_ns)
        if isinstance(report, str):
            return failed(target.name, at_tai, report)
        return nsm_answer(target.name, report, served_posix - host_ns, at_tai)
