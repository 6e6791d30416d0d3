"""The NTS load's pure parts: the NTS-KE request it starts a session with and what it reads of the answer
(RFC 8915 section 4), the key file it hands its generator, and the verdict on its rounds (the best sustainable
window of each server, the median of the per-round ratios, decided only when every round agrees).

Pure; ``bench/nts_throughput.py`` runs the servers and the load, ``tests/unit/test_harness_nts_load.py`` tests it.
"""

from __future__ import annotations

import statistics
import struct
from dataclasses import dataclass

from appliance.protocol.ntp import nts

LOSS_LIMIT_PCT = 0.1
SERVERS = ("chronyd", "appliance")
MIN_DECIDING_ROUNDS = 3  # fewer rounds decide nothing on a noisy host


def ke_request() -> bytes:
    """An NTS-KE request: NTPv4, AEAD_AES_SIV_CMAC_256, End of Message (RFC 8915 §4)."""
    return (nts.Record(True, nts.NEXT_PROTOCOL, struct.pack("!H", nts.PROTOCOL_NTPV4)).encode()
            + nts.Record(False, nts.AEAD_ALGORITHM, struct.pack("!H", nts.AEAD_AES_SIV_CMAC_256)).encode()
            + nts.Record(True, nts.END_OF_MESSAGE, b"").encode())


@dataclass(frozen=True)
class KeResult:
    cookies: tuple[bytes, ...]
    port: int | None  # the NTP port a Port record named, None without one
    server: str | None  # the NTP server a Server record named
    aead: int | None
    error: int | None  # an Error record's code


def parse_ke_response(data: bytes) -> KeResult:
    """What an NTS-KE response says; ValueError when it does not end in End of Message."""
    records, complete = nts.parse_records(data)
    if not complete:
        raise ValueError(f"NTS-KE response of {len(data)} bytes without End of Message")
    cookies, port, server, aead, error = [], None, None, None, None
    for rec in records:
        if rec.type == nts.NEW_COOKIE:
            cookies.append(rec.body)
        elif rec.type == nts.PORT and len(rec.body) == 2:
            port = struct.unpack("!H", rec.body)[0]
        elif rec.type == nts.SERVER:
            server = rec.body.decode("ascii", "replace")
        elif rec.type == nts.AEAD_ALGORITHM and len(rec.body) == 2:
            aead = struct.unpack("!H", rec.body)[0]
        elif rec.type == nts.ERROR and len(rec.body) == 2:
            error = struct.unpack("!H", rec.body)[0]
    return KeResult(tuple(cookies), port, server, aead, error)


def key_file_text(c2s: bytes, s2c: bytes, cookies: tuple[bytes, ...] | list[bytes]) -> str:
    """The generator's key file (bench/ntsload.c -k): the keys and at most 8 cookies, in hex."""
    if len(c2s) != nts.KEY_LEN or len(s2c) != nts.KEY_LEN or not cookies:
        raise ValueError("two 32-byte keys and at least one cookie are needed")
    return f"c2s {c2s.hex()}\ns2c {s2c.hex()}\n" + "".join(f"cookie {c.hex()}\n" for c in list(cookies)[:8])


def sustainable(run: dict) -> bool:
    """At most LOSS_LIMIT_PCT lost, and every reply a valid authenticated one (no NAK, KoD or invalid reply)."""
    return (run["loss_pct"] <= LOSS_LIMIT_PCT and run["valid"] > 0 and run["invalid"] == 0 and run["nak"] == 0
            and run["kod"] == 0)


NOTHING = {"replies_per_s": 0.0, "loss_pct": 100.0, "rtt_us_p99": 0.0, "window": 0, "load_cpu_pct": 0.0}


def best_sustainable(runs: list[dict]) -> dict:
    ok = [r for r in runs if sustainable(r)]
    return max(ok, key=lambda r: r["replies_per_s"]) if ok else dict(NOTHING)


def summarize(rounds: list[dict[str, float]]) -> dict:
    """Each round's best replies/s per server -> medians, the per-round ratios appliance / chronyd, their median and
    range, the verdict (median ratio >= 1.0) and whether every round agrees with it."""
    ratios = [r["appliance"] / r["chronyd"] if r["chronyd"] > 0 else float("nan") for r in rounds]
    finite = [x for x in ratios if x == x]
    median_ratio = statistics.median(finite) if finite else float("nan")
    passed = median_ratio >= 1.0  # nan: False
    decided = (len(finite) == len(ratios) >= MIN_DECIDING_ROUNDS and all((x >= 1.0) == passed for x in finite))
    return {"median": {name: statistics.median(r[name] for r in rounds) for name in SERVERS},
            "spread": {name: (min(r[name] for r in rounds), max(r[name] for r in rounds)) for name in SERVERS},
            "ratios": ratios, "median_ratio": median_ratio,
            "ratio_range": (min(finite), max(finite)) if finite else (float("nan"), float("nan")),
            "passed": passed, "decided": decided}
