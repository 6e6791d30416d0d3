"""SMPTE ST 2059-2: the profile and its synchronization metadata TLV (frame rate, local offset, the next
daylight-saving or leap-second jump, locking status), sent by a MASTER port every second."""

from __future__ import annotations

import dataclasses

import pytest

from appliance.edge.irig.cli import offset_function
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp import smpte
from appliance.protocol.ptp.profiles import load_profile
from tests.unit.test_ptp_port import HOLDOVER, LOCKED, S, make, run

UTC_OFFSET = 37
# 2026-03-08 07:00:00 UTC: New York leaves EST (-5 h) for EDT (-4 h); 2026-11-01 06:00:00 UTC: back
NY_SPRING_POSIX = 1_772_953_200
NY_FALL_POSIX = 1_793_512_800


def tai_ns(posix_s: int) -> int:
    return (posix_s + UTC_OFFSET) * S


def test_the_profile_is_domain_127_with_its_intervals_and_the_metadata() -> None:
    p = load_profile("st2059-2")
    assert (p.domain, p.log_announce_interval, p.log_sync_interval, p.log_min_delay_req_interval) == (127, -2, -3, -3)
    assert p.announce_receipt_timeout == 3 and p.smpte_tlv and p.transports == ("udp4", "udp6")
    assert p.profile_identity == "68-97-E8-00-01-00"


@pytest.mark.parametrize("text,rate", [("30000/1001", (30000, 1001)), ("29.97", (30000, 1001)),
                                       ("59.94", (60000, 1001)), ("23.976", (24000, 1001)), ("25", (25, 1)),
                                       ("50/1", (50, 1))])
def test_frame_rates(text: str, rate: tuple[int, int]) -> None:
    assert smpte.parse_frame_rate(text) == rate


@pytest.mark.parametrize("text", ["0", "-25", "abc", "1/0", ""])
def test_bad_frame_rates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="frame rate"):
        smpte.parse_frame_rate(text)


def test_utc_metadata_has_the_ptp_to_utc_offset_and_no_jump() -> None:
    f = smpte.SyncMetadata((25, 1)).fields(tai_ns(NY_SPRING_POSIX), LOCKED)
    assert f["current_local_offset"] == -UTC_OFFSET and f["jump_seconds"] == 0 and f["time_of_next_jump"] == 0
    assert f["time_address_flags"] == 0 and f["master_locking_status"] == 4 and f["daylight_saving"] == 0


def test_a_zone_gives_its_offset_and_the_next_daylight_saving_jump() -> None:
    meta = smpte.SyncMetadata((30000, 1001), offset_function("America/New_York"))
    f = meta.fields(tai_ns(NY_SPRING_POSIX - 3600), LOCKED)
    assert f["current_local_offset"] == -5 * 3600 - UTC_OFFSET
    assert f["jump_seconds"] == 3600 and f["time_of_next_jump"] == NY_SPRING_POSIX + UTC_OFFSET
    assert f["daylight_saving"] == 0b10 and f["leap_second_jump"] == 0 and f["time_address_flags"] == 1
    after = meta.fields(tai_ns(NY_SPRING_POSIX + 10), LOCKED)
    assert after["current_local_offset"] == -4 * 3600 - UTC_OFFSET and after["daylight_saving"] == 0b01
    assert after["jump_seconds"] == -3600 and after["time_of_next_jump"] == NY_FALL_POSIX + UTC_OFFSET


def test_a_pending_leap_second_is_the_next_jump_when_it_comes_first() -> None:
    leap_at = tai_ns(NY_SPRING_POSIX - 600)
    view = dataclasses.replace(LOCKED, leap_change_s=1, leap_at_tai_ns=leap_at)
    f = smpte.SyncMetadata(offset_of=offset_function("America/New_York")).fields(tai_ns(NY_SPRING_POSIX - 3600),
                                                                                 view)
    assert f["jump_seconds"] == -1 and f["time_of_next_jump"] == leap_at // S and f["leap_second_jump"] == 1


def test_locking_status_follows_the_clock() -> None:
    meta = smpte.SyncMetadata()
    assert meta.fields(0, LOCKED)["master_locking_status"] == 4
    assert meta.fields(0, HOLDOVER)["master_locking_status"] == 1
    assert meta.fields(0, dataclasses.replace(LOCKED, state="ACQUIRING"))["master_locking_status"] == 2


def test_the_tlv_packs_48_octets_and_unpacks_to_its_fields() -> None:
    meta = smpte.SyncMetadata((30000, 1001), offset_function("America/New_York"))
    tlv = meta.tlv(tai_ns(NY_SPRING_POSIX - 3600), LOCKED)
    packed = tlv.pack()
    assert packed[:4] == bytes.fromhex("0003") + (48).to_bytes(2, "big")
    assert packed[4:10] == bytes.fromhex("6897e8000001")
    assert smpte.unpack(tlv.data) == meta.fields(tai_ns(NY_SPRING_POSIX - 3600), LOCKED)


def test_a_master_port_sends_the_metadata_every_second_in_a_management_command() -> None:
    port = make("st2059-2")
    sent = run(port, 10 * S)
    metadata = [m for m in sent if isinstance(m, c.Management)]
    syncs = [m for m in sent if isinstance(m, c.Sync)]
    assert 9 <= len(metadata) <= 10 and len(syncs) >= 8 * 9  # MASTER after 3 Announce intervals (0.75 s)
    m = metadata[0]
    assert m.action == c.COMMAND and m.target_port == c.PortIdentity(b"\xff" * 8, 0xFFFF) and m.header.domain == 127
    tlv = m.tlvs[0]
    assert isinstance(tlv, c.OrganizationExtensionTlv) and tlv.organization_id == smpte.SMPTE_OUI
    assert smpte.unpack(tlv.data)["numerator"] == 30000
    assert port.counters["tx_smpte_metadata"] == len(metadata)


def test_other_profiles_send_no_metadata() -> None:
    assert not [m for m in run(make(), 10 * S) if isinstance(m, c.Management)]
