"""How the running kernel preempts kernel code: what a real-time thread can count on.

Edge (files under /proc, /sys and /boot).  A SCHED_FIFO thread preempts any user thread at once, but kernel code
only on a kernel that preempts it: with ``none`` (and, between its explicit preemption points, ``voluntary``) a
kernel worker's whole item runs before the real-time thread gets its CPU back, a millisecond or more.  The mode is
read, in order of trust, from the scheduler's debug file (a PREEMPT_DYNAMIC kernel's current mode; root only), the
boot command line's ``preempt=``, the kernel's build configuration (``/proc/config.gz`` or ``/boot/config-*``: a
PREEMPT_DYNAMIC kernel's default) and the build string (``uname -v``: PREEMPT_RT, PREEMPT).
"""

from __future__ import annotations

import gzip
import os
import re
from typing import Any

MODES = ("none", "voluntary", "full", "lazy", "rt")
WEAK = ("none", "voluntary")  # a kernel worker can hold a real-time thread off for its whole item
DEBUG_FILE = "/sys/kernel/debug/sched/preempt"  # "none (voluntary) full lazy": the current one in parentheses
CMDLINE = "/proc/cmdline"
CONFIG_OPTIONS = (("CONFIG_PREEMPT_RT", "rt"), ("CONFIG_PREEMPT_LAZY", "lazy"), ("CONFIG_PREEMPT", "full"),
                  ("CONFIG_PREEMPT_VOLUNTARY", "voluntary"), ("CONFIG_PREEMPT_NONE", "none"))


def _read(path: str) -> str | None:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rt", errors="replace") as f:
                return f.read()
        with open(path, errors="replace") as f:
            return f.read()
    except (OSError, EOFError):
        return None


def preemption(debug_file: str = DEBUG_FILE, cmdline: str = CMDLINE, configs: tuple[str, ...] | None = None,
               build: str | None = None) -> dict[str, Any]:
    """``{"mode": one of MODES or "unknown", "from": where it was read}``."""
    text = _read(debug_file)
    m = re.search(r"\((\w+)\)", text or "")
    if m and m.group(1) in MODES:
        return {"mode": m.group(1), "from": debug_file}
    text = _read(cmdline)
    m = re.search(r"(?:^|\s)preempt=(\w+)", text or "")
    if m and m.group(1) in MODES:
        return {"mode": m.group(1), "from": f"{cmdline} preempt="}
    if build is None:
        build = os.uname().version
    words = build.split()
    if "PREEMPT_RT" in words:
        return {"mode": "rt", "from": "uname -v"}
    if configs is None:
        configs = ("/proc/config.gz", f"/boot/config-{os.uname().release}")
    for path in configs:
        text = _read(path)
        if text is None:
            continue
        for option, mode in CONFIG_OPTIONS:
            if re.search(rf"^{option}=y$", text, re.M):
                return {"mode": mode, "from": path}
    if "PREEMPT" in words:  # a kernel built to preempt, without PREEMPT_DYNAMIC to choose otherwise
        return {"mode": "full", "from": "uname -v"}
    return {"mode": "unknown", "from": "none readable"}
