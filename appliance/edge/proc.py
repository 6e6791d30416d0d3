"""Child processes of the appliance: the NTP workers and the console process die with it.

Edge helper (prctl through ctypes, signals).
"""

from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to send this process SIGTERM when the process that started it ends (Linux; elsewhere a
    no-op), so that a killed appliance leaves no worker holding its ports."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
