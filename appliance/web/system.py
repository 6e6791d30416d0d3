"""The system page and ``/api/v1/system``: version, uptime, each process's CPU and memory, the state directory's disk
use, and who the NTP clients are.

Edge module (Flask views; /proc and the state directory through ``edge/procstats.py``).  The processes are the ones
the published status names (the NTP workers, the NTS-KE server, the console, the SNMP agent, each with its pid) and
the appliance itself, the console process's parent (the same process when the console runs inside it, as in
tests).  CPU is a percentage of one core over the interval since the last look (none on the first), and CPU
seconds since the process started; memory is the resident set.  The NTP figures are the status's
(``outputs.ntp.clients``, ``edge/ntp/service.py``).  A viewer may read all of it: nothing here is secret (file names
of the state directory, not their contents).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from flask import Blueprint, current_app, jsonify, render_template

from appliance.edge.procstats import DiskUse, ProcessSampler
from appliance.units import NS_PER_S
from appliance.web.access import ctx_of

bp = Blueprint("system", __name__)
KOD_CODES = {"kod_rate": "RATE", "kod_deny": "DENY", "kod_rstr": "RSTR", "nts_nak": "NTSN"}
_parts_lock = threading.Lock()
STATE_ITEMS = {  # what the state directory's items are, for the operator
    "audit.sqlite": "audit trail (with its write-ahead log and head file)",
    "quality.sqlite": "time-quality record",
    "users.sqlite": "console users and API tokens",
    "nts/": "NTS-KE certificate and cookie keys",
    "clock-state.json": "what the clock learned (restored at start)",
    "web-cert.pem": "console TLS certificate", "web-key.pem": "console TLS key",
    "web-secret.key": "console session signing key", "console-settings.toml": "settings changed from the console",
    "snmp-engine-id": "SNMP engine ID", "snmp-engine-boots": "SNMP engine boots", "snmp-users.toml": "SNMPv3 users",
    "audit-signing.key": "audit bundle signing key", "audit-signing.pub": "audit bundle public key",
    "initial-admin-password": "first admin password (deleted once changed)",
}


def _parts() -> tuple[ProcessSampler, DiskUse | None]:
    """The application's sampler and disk-use cache (made at first use: each app has its own)."""
    ext = current_app.extensions
    with _parts_lock:
        if "system" not in ext:
            state_dir = ctx_of().state_dir
            ext["system"] = (ProcessSampler(), DiskUse(Path(state_dir)) if state_dir is not None else None)
    return ext["system"]  # type: ignore[no-any-return]


def _processes(status: dict[str, Any], sampler: ProcessSampler) -> list[dict[str, Any]]:
    """One row per process: the appliance first, then what the status names."""
    outputs = status.get("outputs") or {}
    ntp, web, snmp = outputs.get("ntp") or {}, outputs.get("web") or {}, outputs.get("snmp") or {}
    own = os.getpid()
    console_pid = (web.get("process") or {}).get("pid")
    appliance_pid = os.getppid() if console_pid == own else own  # the console in a process of its own: its parent
    wanted: list[tuple[str, str, int | None, dict[str, Any]]] = [("appliance", "Appliance", appliance_pid, {})]
    for worker in ntp.get("workers") or []:
        wanted.append(("ntp-worker", f"NTP worker {worker.get('index')}", worker.get("pid"),
                       {"restarts": worker.get("restarts", 0)}))
    if ntp.get("nts"):
        wanted.append(("nts-ke", "NTS-KE server", ntp["nts"].get("pid"), {"restarts": ntp["nts"].get("restarts", 0)}))
    for role, label, part in (("console", "Web console", web), ("snmp", "SNMP agent", snmp)):
        if part.get("process"):
            wanted.append((role, label, part["process"].get("pid"), {"restarts": part["process"].get("restarts", 0)}))
    rows = []
    for role, label, pid, extra in wanted:
        sample = sampler.sample(int(pid)) if pid else None
        row: dict[str, Any] = {"role": role, "label": label, "pid": pid or None, "alive": sample is not None,
                               "restarts": extra.get("restarts", 0)}
        for name in ("cpu_percent", "cpu_s", "rss_bytes", "peak_rss_bytes", "threads", "state"):
            row[name] = sample.get(name) if sample else None
        rows.append(row)
    return rows


def _ntp(status: dict[str, Any]) -> dict[str, Any]:
    ntp = (status.get("outputs") or {}).get("ntp")
    if not ntp:  # the same keys, with nothing in them
        return {"enabled": False, "listen": None, "port": None, "error": "", "requests": None, "replies": None,
                "request_rate_per_s": None, "rate_window_s": 0, "window_s": 60, "top": [], "kod_sent": None,
                "kod": {}, "rate_limited": None}
    totals, clients = ntp.get("totals") or {}, ntp.get("clients") or {}
    return {"enabled": True, "listen": ntp.get("listen"), "port": ntp.get("port"), "error": ntp.get("error", ""),
            "requests": totals.get("requests", 0), "replies": totals.get("replies", 0),
            "request_rate_per_s": clients.get("request_rate_per_s"), "rate_window_s": clients.get("rate_window_s", 0),
            "window_s": clients.get("window_s", 60), "top": clients.get("top", []),
            "kod_sent": clients.get("kod_sent", sum(totals.get(k, 0) for k in KOD_CODES)),
            "kod": {code: totals.get(name, 0) for name, code in KOD_CODES.items()},
            "rate_limited": totals.get("drop_rate_limited", 0)}


def report() -> dict[str, Any]:
    """Everything the system page shows, as ``/api/v1/system`` answers it."""
    ctx = ctx_of()
    status = ctx.status()
    sampler, disk = _parts()
    started = int(status["started_at_tai_ns"])
    now = ctx.now_tai_ns()
    return {"version": status.get("version"), "mode": status.get("mode"), "started_at_tai_ns": started,
            "started_at_utc": ctx.utc_label(started), "uptime_s": max(0, (now - started) // NS_PER_S),
            "cpus": os.cpu_count() or 1, "processes": _processes(status, sampler),
            "disk": _described(disk.get()) if disk is not None else None, "ntp": _ntp(status)}


def _described(disk: dict[str, Any]) -> dict[str, Any]:
    items = [{**item, "what": STATE_ITEMS.get(item["name"], "")} for item in disk.get("items", [])]
    return {**disk, "items": items} if "items" in disk else disk


@bp.route("/system")
def system_page() -> Any:
    return render_template("system.html", page="system", system=report())


@bp.route("/api/v1/system")
def system_api() -> Any:
    return jsonify(report())
