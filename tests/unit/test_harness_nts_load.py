"""The NTS throughput bench's pure parts (harness/nts_load.py): the NTS-KE exchange it makes, the key file it
hands its generator, and its verdict (median of per-round ratios, decided only when every round agrees)."""

from __future__ import annotations

import struct

import pytest

from appliance.protocol.ntp import nts
from harness.nts_load import (best_sustainable, key_file_text, ke_request, parse_ke_response, summarize,
                              sustainable)


def _run(**over) -> dict:
    return {"replies_per_s": 1000.0, "loss_pct": 0.0, "rtt_us_p99": 100.0, "window": 8, "load_cpu_pct": 50.0,
            "valid": 3000, "invalid": 0, "nak": 0, "kod": 0} | over


def test_the_ke_request_asks_for_ntpv4_and_aes_siv_and_ends() -> None:
    records, complete = nts.parse_records(ke_request())
    assert complete
    assert [(r.type, r.body) for r in records[:2]] == [(nts.NEXT_PROTOCOL, struct.pack("!H", nts.PROTOCOL_NTPV4)),
                                                      (nts.AEAD_ALGORITHM, struct.pack("!H", 15))]


def test_a_ke_response_gives_cookies_port_server_and_aead() -> None:
    data = b"".join(r.encode() for r in (
        nts.Record(True, nts.NEXT_PROTOCOL, struct.pack("!H", 0)),
        nts.Record(True, nts.AEAD_ALGORITHM, struct.pack("!H", 15)),
        nts.Record(False, nts.NEW_COOKIE, b"a" * 104), nts.Record(False, nts.NEW_COOKIE, b"b" * 104),
        nts.Record(True, nts.PORT, struct.pack("!H", 12345)), nts.Record(True, nts.SERVER, b"127.0.0.1"),
        nts.Record(True, nts.END_OF_MESSAGE, b"")))
    got = parse_ke_response(data)
    assert got.cookies == (b"a" * 104, b"b" * 104) and got.port == 12345 and got.server == "127.0.0.1"
    assert got.aead == 15 and got.error is None


def test_a_ke_response_cut_short_is_refused() -> None:
    with pytest.raises(ValueError, match="without End of Message"):
        parse_ke_response(nts.Record(False, nts.NEW_COOKIE, b"a" * 104).encode())


def test_the_key_file_names_both_keys_and_at_most_eight_cookies() -> None:
    text = key_file_text(b"\x01" * 32, b"\x02" * 32, [bytes([i]) * 4 for i in range(10)])
    lines = text.splitlines()
    assert lines[0] == "c2s " + "01" * 32 and lines[1] == "s2c " + "02" * 32
    assert len([x for x in lines if x.startswith("cookie ")]) == 8
    with pytest.raises(ValueError):
        key_file_text(b"\x01" * 16, b"\x02" * 32, [b"c"])


def test_a_window_with_a_nak_or_too_much_loss_is_not_sustainable() -> None:
    assert sustainable(_run())
    assert not sustainable(_run(nak=1)) and not sustainable(_run(kod=1)) and not sustainable(_run(invalid=1))
    assert not sustainable(_run(loss_pct=0.2))
    best = best_sustainable([_run(replies_per_s=5000.0, nak=1), _run(replies_per_s=2000.0), _run()])
    assert best["replies_per_s"] == 2000.0
    assert best_sustainable([_run(loss_pct=5.0)])["replies_per_s"] == 0.0


def test_the_verdict_is_the_median_ratio_and_decided_only_when_every_round_agrees() -> None:
    rounds = [{"chronyd": 100.0, "appliance": a} for a in (120.0, 110.0, 130.0)]
    s = summarize(rounds)
    assert s["passed"] and s["decided"] and s["median_ratio"] == pytest.approx(1.2)
    mixed = summarize([{"chronyd": 100.0, "appliance": a} for a in (90.0, 110.0, 130.0)])
    assert mixed["passed"] and not mixed["decided"]
    short = summarize(rounds[:2])
    assert short["passed"] and not short["decided"]
    assert not summarize([{"chronyd": 100.0, "appliance": 9.0}] * 3)["passed"]
