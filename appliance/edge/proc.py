"""Child processes of the appliance: the NTP workers, the console and the SNMP agent die with it; the console and
the SNMP agent run at idle priority.

Edge helper (prctl through ctypes, signals, scheduling class).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading

PR_SET_PDEATHSIG = 1
IDLE_NICE = 19  # where SCHED_IDLE is refused

log = logging.getLogger("appliance")


def die_with_parent() -> None:
    """Ask the kernel to send this process SIGTERM when the process that started it ends (Linux; elsewhere a
    no-op), so that a killed appliance leaves no worker holding its ports."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def lower_priority() -> None:
    """Make the calling thread run only when nothing else wants the CPU (Linux SCHED_IDLE, for this thread and
    the threads it starts from now on).  The time services run in the main loop and the NTP worker processes at
    normal priority; an operator's browser, a scraper or a walking NMS must never take CPU from them, nor delay
    them: a waking NTP worker preempts a SCHED_IDLE thread at once, where a merely niced one keeps its time slice
    (milliseconds of NTP latency).  A console or agent under load answers more slowly instead.  Where SCHED_IDLE
    is refused, the thread is niced to 19."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return
    except (OSError, AttributeError) as exc:
        log.debug("no SCHED_IDLE (%s): nice %d instead", exc, IDLE_NICE)
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), IDLE_NICE)
    except OSError as exc:  # not Linux, or a sandbox that forbids it: the console still works
        log.debug("cannot lower thread priority: %s", exc)
