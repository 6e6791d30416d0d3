"""Framer: receiver bytes in any chunking -> NMEA sentences, UBX frames, Unicore lines and counted rejections."""

from __future__ import annotations

import pytest

from appliance import leap
from appliance.events import Rejected
from appliance.gnss.framer import (NMEA_MAX_LEN, UNICORE_LOG_MAX_LEN, Framer, NmeaFrame, UbxFrame, UnicoreFrame,
                                   nmea_checksum, nmea_sentence_bytes, ubx_frame_bytes, unicore_crc32)
from appliance.gnss.receiver import GnssReceiver

RMC = "GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W"
GGA = "GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,"
TIM_TP = ubx_frame_bytes(0x0D, 0x01, bytes(range(16)))
EOE = ubx_frame_bytes(0x01, 0x61, b"\x10\x27\x00\x00")


def frame_all(*chunks: bytes) -> list:
    framer = Framer()
    out = []
    for chunk in chunks:
        out += framer.feed(chunk)
    return out + framer.flush()


def sentence(body: str) -> NmeaFrame:
    return NmeaFrame(nmea_sentence_bytes(body).decode().rstrip())


def reasons(items: list) -> list[tuple[str, str]]:
    return [(r.what, r.reason) for r in items if isinstance(r, Rejected)]


def frames(items: list) -> list:
    return [f for f in items if not isinstance(f, Rejected)]


def test_crlf_and_lf_line_endings_give_the_same_sentences():
    crlf = nmea_sentence_bytes(RMC) + nmea_sentence_bytes(GGA)
    lf = crlf.replace(b"\r\n", b"\n")
    assert frame_all(crlf) == frame_all(lf) == [sentence(RMC), sentence(GGA)]


MIXED = b"\r\n" + nmea_sentence_bytes(RMC) + TIM_TP + b"\x00\xff" + nmea_sentence_bytes(GGA) + EOE + b"$GPG"


def test_every_split_point_gives_the_same_output():
    whole = frame_all(MIXED)
    assert frames(whole) == [sentence(RMC), UbxFrame(0x0D, 0x01, bytes(range(16))), sentence(GGA),
                             UbxFrame(0x01, 0x61, b"\x10\x27\x00\x00")]
    assert reasons(whole) == [("bytes", "noise"), ("nmea", "truncated")]
    for split in range(len(MIXED) + 1):
        assert frame_all(MIXED[:split], MIXED[split:]) == whole, split


def test_byte_at_a_time_gives_the_same_output():
    assert frame_all(*(MIXED[i : i + 1] for i in range(len(MIXED)))) == frame_all(MIXED)


def test_bad_checksum_is_rejected_and_the_next_sentence_survives():
    bad = nmea_sentence_bytes(RMC).replace(b"*", b"0*")
    assert reasons(frame_all(bad + nmea_sentence_bytes(GGA))) == [("nmea", "bad-checksum")]
    assert frames(frame_all(bad + nmea_sentence_bytes(GGA))) == [sentence(GGA)]


def test_missing_checksum_is_rejected():
    assert reasons(frame_all(b"$" + RMC.encode() + b"\r\n")) == [("nmea", "no-checksum")]


@pytest.mark.parametrize("field", ["+{:X}", " {:X}", "{:02X}x", "{:03X}"])
def test_checksum_must_be_exactly_two_hex_digits(field):
    body = "GPTXT,01,01,02,A"
    assert nmea_checksum(body.encode()) == 0x0C  # one hex digit: "+C" and " C" would equal it as numbers
    line = f"${body}*{field.format(nmea_checksum(body.encode()))}\r\n".encode()
    assert reasons(frame_all(line)) == [("nmea", "bad-checksum")]


def test_lowercase_checksum_and_trailing_blanks_are_accepted():
    line = nmea_sentence_bytes(RMC).rstrip()
    lowercase = line[:-2] + line[-2:].lower()
    assert frame_all(lowercase + b"  \r\n") == [NmeaFrame(lowercase.decode())]


def test_overlong_line_is_rejected_and_framing_recovers():
    long_line = b"$GPTXT," + b"A" * (2 * NMEA_MAX_LEN) + b"\r\n"
    out = frame_all(long_line + nmea_sentence_bytes(GGA))
    assert ("nmea", "overlong") in reasons(out)
    assert frames(out) == [sentence(GGA)]


def test_longest_allowed_sentence_passes_and_one_more_byte_is_overlong():
    body = "GPTXT," + "A" * (NMEA_MAX_LEN - 9)
    assert len(nmea_sentence_bytes(body).rstrip()) == NMEA_MAX_LEN + 1
    assert frame_all(nmea_sentence_bytes(body)) == [sentence(body)]
    assert reasons(frame_all(nmea_sentence_bytes(body + "A")))[0] == ("nmea", "overlong")


def test_non_ascii_inside_a_sentence_is_rejected():
    damaged = nmea_sentence_bytes(RMC).replace(b"4807", b"48\xe907")
    out = frame_all(damaged + nmea_sentence_bytes(GGA))
    assert reasons(out)[0] == ("nmea", "non-ascii")
    assert frames(out) == [sentence(GGA)]


def test_ubx_frame_right_after_a_sentence_without_line_ending():
    glued = nmea_sentence_bytes(RMC).rstrip() + TIM_TP + nmea_sentence_bytes(GGA).rstrip() + b"$" + GGA.encode()
    out = frame_all(glued)
    assert frames(out) == [sentence(RMC), UbxFrame(0x0D, 0x01, bytes(range(16))), sentence(GGA)]
    assert reasons(out) == [("nmea", "truncated")]  # the last one never got its checksum


def test_sentence_cut_short_by_a_ubx_frame_is_truncated():
    out = frame_all(b"$GPRMC,1235" + TIM_TP + nmea_sentence_bytes(GGA))
    assert reasons(out) == [("nmea", "truncated")]
    assert frames(out) == [UbxFrame(0x0D, 0x01, bytes(range(16))), sentence(GGA)]


def test_false_ubx_sync_inside_noise_is_noise():
    out = frame_all(b"garbage\xb5\x00more\xb5" + b"b\x77\x00" + nmea_sentence_bytes(GGA))
    assert frames(out) == [sentence(GGA)]
    assert reasons(out) == [("bytes", "noise"), ("ubx", "bad-header"), ("bytes", "noise")]


def test_noise_is_counted_the_same_however_it_is_chunked():
    noise = b"xx\xb5z\xb5"
    whole = frame_all(noise + b"yy" + nmea_sentence_bytes(GGA))
    assert whole == [Rejected("bytes", "noise", "7 bytes between frames"), sentence(GGA)]
    for split in range(len(noise) + 1):
        assert frame_all(noise[:split], noise[split:] + b"yy" + nmea_sentence_bytes(GGA)) == whole


def test_ubx_bad_checksum_then_a_good_frame():
    corrupt = bytearray(TIM_TP)
    corrupt[10] ^= 0xFF
    out = frame_all(bytes(corrupt) + EOE)
    assert reasons(out)[0] == ("ubx", "bad-checksum")
    assert frames(out) == [UbxFrame(0x01, 0x61, b"\x10\x27\x00\x00")]


def test_false_sync_announcing_a_long_frame_does_not_swallow_what_follows():
    false_sync = b"\xb5\x62\x01\x07\x00\x01"  # plausible class, 256-byte payload that never comes
    stream = false_sync + b"".join(nmea_sentence_bytes(RMC) for _ in range(4)) + EOE
    out = frame_all(stream)
    assert frames(out) == [sentence(RMC)] * 4 + [UbxFrame(0x01, 0x61, b"\x10\x27\x00\x00")]
    assert reasons(out)[0] == ("ubx", "bad-checksum")


def test_truncated_ubx_frame_at_end_of_stream():
    assert reasons(frame_all(nmea_sentence_bytes(GGA) + TIM_TP[:-3])) == [("ubx", "truncated")]


def test_flush_reports_noise_before_the_unfinished_frame():
    assert reasons(frame_all(b"noise", b"$GPGGA,12")) == [("bytes", "noise"), ("nmea", "truncated")]
    assert reasons(frame_all(b"noise$GPGGA,12")) == [("bytes", "noise"), ("nmea", "truncated")]


def test_ais_style_sentence_is_framed():
    body = "AIVDM,1,1,,A,13u?etPv2;0n:dDPwUM1U1Cb069D,0"
    line = f"!{body}*{nmea_checksum(body.encode()):02X}\r\n".encode()
    assert frame_all(line) == [NmeaFrame(line.decode().rstrip())]


# --- Unicore answers and ASCII logs ----------------------------------------------------------------------------
# Lines as real UM980/UM982 receivers sent them (published with open-source drivers); their checksums were checked
# by hand: the answers' XOR covers the '$', the VERSIONA log's CRC-32 starts from 0 with no final inversion.
ANSWER_OK = "$command,MODE,response: OK*5D"
ANSWER_ERROR = "$command,badResponse,response: PARSING FAILD NO MATCHING FUNC  BADRESPONSE*40"
VERSIONA = ('#VERSIONA,97,GPS,FINE,2343,48235000,0,0,18,813;"UM980","R4.10Build11833","HRPT00-S10C-P",'
            '"2310415000001-MD22A2225022497","ff3ba396dcb0478d","2023/11/24"*270a13f7')
MODE_LOG = "#MODE,81,GPS,FINE,2230,547967000,0,0,18,518;MODE ROVER SURVEY,*1B"


def test_unicore_answers_and_logs_are_framed_whole():
    stream = "".join(line + "\r\n" for line in (ANSWER_OK, ANSWER_ERROR, VERSIONA, MODE_LOG)).encode()
    assert frame_all(stream) == [UnicoreFrame(ANSWER_OK), UnicoreFrame(ANSWER_ERROR), UnicoreFrame(VERSIONA),
                                 UnicoreFrame(MODE_LOG)]
    assert all(isinstance(frame, NmeaFrame) for frame in frame_all(stream))  # consumers of NMEA still count them


def test_unicore_crc32_is_zlib_crc32_without_its_inversions():
    assert unicore_crc32(VERSIONA[1 : VERSIONA.index("*")].encode()) == 0x270A13F7
    assert unicore_crc32(b"") == 0


def test_an_answer_with_the_nmea_checksum_convention_is_accepted_too():
    body = ANSWER_OK[1 : ANSWER_OK.index("*")]
    assert frame_all(nmea_sentence_bytes(body)) == [UnicoreFrame(nmea_sentence_bytes(body).decode().rstrip())]


def test_a_damaged_answer_is_a_bad_checksum():
    assert reasons(frame_all(ANSWER_OK.replace("MODE", "MODF").encode() + b"\r\n")) == [("nmea", "bad-checksum")]


def test_only_unicore_heads_may_checksum_the_dollar():
    checked_with_dollar = f"${GGA}*{nmea_checksum(('$' + GGA).encode()):02X}\r\n".encode()
    assert reasons(frame_all(checked_with_dollar)) == [("nmea", "bad-checksum")]


def test_a_damaged_log_is_noise_and_what_follows_survives():
    damaged = VERSIONA.replace("UM980", "UM981").encode() + b"\r\n"
    out = frame_all(damaged + nmea_sentence_bytes(GGA))
    assert out == [Rejected("bytes", "noise", f"{len(VERSIONA)} bytes between frames"), sentence(GGA)]


def test_hash_in_noise_is_noise_as_before_and_a_log_right_behind_it_is_found():
    assert frame_all(b"xx#yy" + nmea_sentence_bytes(GGA)) == [Rejected("bytes", "noise", "5 bytes between frames"),
                                                              sentence(GGA)]
    out = frame_all(b"#junk" + VERSIONA.encode() + b"\r\n")
    assert out == [Rejected("bytes", "noise", "5 bytes between frames"), UnicoreFrame(VERSIONA)]


def test_hash_inside_a_sentence_is_text():
    body = "GPTXT,01,01,02,#A"
    assert frame_all(nmea_sentence_bytes(body)) == [sentence(body)]


def test_a_log_glued_to_the_next_sentence_is_whole():
    assert frames(frame_all(VERSIONA.encode() + nmea_sentence_bytes(GGA))) == [UnicoreFrame(VERSIONA), sentence(GGA)]


def test_an_unfinished_or_overlong_log_is_noise():
    assert frame_all(VERSIONA[:40].encode()) == [Rejected("bytes", "noise", "40 bytes between frames")]
    overlong = b"#LONG," + b"A" * UNICORE_LOG_MAX_LEN + b"*00000000\r\n"
    out = frame_all(overlong + nmea_sentence_bytes(GGA))
    assert reasons(out) == [("bytes", "noise")]
    assert frames(out) == [sentence(GGA)]


UNICORE_MIXED = (b"x#" + ANSWER_OK.encode() + b"\r\n" + nmea_sentence_bytes(RMC) + VERSIONA.encode() + b"\r\n#no"
                 + TIM_TP + MODE_LOG.encode() + b"\n#MODE,1;x*00\r\n" + nmea_sentence_bytes(GGA))


def test_unicore_lines_in_any_chunking_give_the_same_output():
    whole = frame_all(UNICORE_MIXED)
    assert frames(whole) == [UnicoreFrame(ANSWER_OK), sentence(RMC), UnicoreFrame(VERSIONA),
                             UbxFrame(0x0D, 0x01, bytes(range(16))), UnicoreFrame(MODE_LOG), sentence(GGA)]
    assert reasons(whole) == [("bytes", "noise")] * 3
    for split in range(len(UNICORE_MIXED) + 1):
        assert frame_all(UNICORE_MIXED[:split], UNICORE_MIXED[split:]) == whole, split
    assert frame_all(*(UNICORE_MIXED[i : i + 1] for i in range(len(UNICORE_MIXED)))) == whole


def test_the_receiver_ignores_unicore_lines_rather_than_rejecting_them():
    table = leap.LeapTable.load_default()
    rx = GnssReceiver(lambda: table)
    rx.feed("".join(line + "\r\n" for line in (ANSWER_OK, ANSWER_ERROR, VERSIONA)).encode(), 0)
    rx.finish()
    assert (dict(rx.rejected), dict(rx.ignored)) == ({}, {"command": 2, "VERSIONA": 1})
