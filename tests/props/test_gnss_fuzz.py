"""Fuzzing the GNSS ingestion core: whatever arrives on the serial line, nothing escapes and everything is counted.

The accounting property, stated precisely: build a stream from segments, each either an NMEA segment (one '$' and
then bytes that are never a frame start, i.e. never '$', '!' or 0xB5: a sentence, possibly cut short or with a byte
of its body changed), a whole UBX frame (possibly inserted in the middle of an NMEA segment), or noise (no frame-start
bytes).  Then the framer's NmeaFrame outputs plus its Rejected("nmea", ...) outputs number exactly the NMEA
segments, its UbxFrame outputs are exactly the UBX frames in order, and every NmeaFrame is one of the sentences as
generated.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance import leap
from appliance.events import Rejected
from appliance.gnss import nmea, ubx
from appliance.gnss.framer import Framer, NmeaFrame, UbxFrame, nmea_sentence_bytes, ubx_frame_bytes
from appliance.gnss.receiver import GnssReceiver

TABLE = leap.LeapTable.load_default()
STARTS = frozenset(b"$!\xb5")
FIELD_CHARS = st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters="$!*")
KNOWN_UBX = sorted(ubx.NAMES)
# 150 examples a property keeps the whole file near 10 s; each example is a stream of up to a dozen segments.
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

REAL = ["GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W,A",
        "GNGGA,193334.00,4404.13124,N,12118.84810,W,1,12,0.62,1139.9,M,-21.3,M,,",
        "GNGSA,A,3,08,24,02,18,27,23,32,10,,,,,1.12,0.62,0.94,1",
        "GPGSV,3,1,12,02,24,310,29,08,37,282,42,10,73,011,34,18,19,128,34,1",
        "GNZDA,193334.00,31,07,2025,00,00", "GPGLL,5251.0093,N,00518.8170,E,094736,A,A", "SDDPT,5.3,0.4,"]

# Printable junk, and field-shaped values so that decoding gets past the first field.  At most 16 fields of 8
# characters keeps a sentence under NMEA_MAX_LEN.
fields = st.one_of(st.text(FIELD_CHARS, max_size=8), st.from_regex(r"-?[0-9]{1,6}(\.[0-9]{0,3})?", fullmatch=True),
                   st.sampled_from(["", "A", "V", "N", "S", "E", "W", "M", "235960", "311216", "nan", "1e3"]))
garbled_bodies = st.builds(
    lambda talker, kind, values: f"{talker}{kind}" + "".join("," + v for v in values),
    st.sampled_from(["GP", "GN", "GL", "GA", "GB", "BD", "GQ", "PQ", "QZ", "XX", "PU", "PA", "PT", "PS"]),
    st.sampled_from(sorted(nmea.HANDLED_TYPES) + ["VTG", "GST", "Q,RMC", "BX", "SHR", "NL", "XN"]),
    st.lists(fields, max_size=16))
sentence_bodies = st.one_of(st.sampled_from(REAL), garbled_bodies)
ubx_frames = st.builds(lambda cid, payload: ubx_frame_bytes(*cid, payload),
                       st.sampled_from(KNOWN_UBX), st.binary(max_size=120))
noise = st.binary(max_size=40).map(lambda b: bytes(x for x in b if x not in STARTS))
# Random bytes rarely contain a frame start; these are mostly starts, sync bytes and line ends.
line_bytes = st.one_of(st.binary(max_size=400), st.lists(
    st.one_of(st.sampled_from(b"$!\xb5b*\r\n,0A\x01\x0d"), st.integers(0, 255)), max_size=400).map(bytes))


@st.composite
def nmea_segment(draw) -> tuple[bytes, bytes]:
    """(what goes on the line, the sentence as generated): cut short, a byte of its body changed, or intact.

    One changed byte always breaks the XOR checksum; two could cancel out, which NMEA cannot detect."""
    whole = nmea_sentence_bytes(draw(sentence_bodies))
    line = bytearray(whole)
    if draw(st.booleans()):
        position = draw(st.integers(1, len(line) - 6))  # inside the body, before "*hh\r\n"
        line[position] = draw(st.integers(0, 255).filter(lambda b: b not in STARTS and b != line[position]))
    if draw(st.booleans()):
        line = line[: draw(st.integers(1, len(line)))]
    return bytes(line), whole


@st.composite
def stream(draw) -> tuple[bytes, int, list[bytes], set[str]]:
    """The bytes, how many NMEA segments, the UBX frames in order, the sentences as generated."""
    data, nmea_count, frames, sentences = b"", 0, [], set()
    for kind in draw(st.lists(st.sampled_from(["nmea", "ubx", "noise", "nmea+ubx"]), max_size=12)):
        if kind == "noise":
            data += draw(noise)
        elif kind == "ubx":
            frame = draw(ubx_frames)
            data, frames = data + frame, frames + [frame]
        else:
            line, whole = draw(nmea_segment())
            sentences.add(whole.decode("ascii").rstrip())
            nmea_count += 1
            if kind == "nmea+ubx":  # a binary frame lands inside the sentence
                frame = draw(ubx_frames)
                cut = draw(st.integers(1, len(line)))
                line, frames = line[:cut] + frame + line[cut:], frames + [frame]
            data += line
    return data, nmea_count, frames, sentences


def frame_all(chunks: list[bytes]) -> list:
    framer = Framer()
    out = [item for chunk in chunks for item in framer.feed(chunk)]
    return out + framer.flush()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:])] or [data]


# --- no exception escapes --------------------------------------------------------------------------------------
@FAST
@given(line_bytes, st.lists(st.integers(0, 400), max_size=6))
def test_framer_takes_arbitrary_bytes(data, cuts):
    out = frame_all(split(data, cuts))
    assert all(isinstance(item, (NmeaFrame, UbxFrame, Rejected)) for item in out)
    assert out == frame_all([data])


@FAST
@given(line_bytes, st.lists(st.integers(0, 400), max_size=6))
def test_receiver_takes_arbitrary_bytes(data, cuts):
    rx = GnssReceiver(lambda: TABLE)
    for i, chunk in enumerate(split(data, cuts)):
        rx.feed(chunk, i * 100_000_000)
        rx.tick(i * 100_000_000 + 50_000_000)
    rx.finish()


@FAST
@given(garbled_bodies)
def test_garbled_fields_reach_the_decoder_and_never_raise(body):
    text = nmea_sentence_bytes(body).decode("ascii").rstrip()
    (frame,) = frame_all([text.encode() + b"\r\n"])
    assert frame == NmeaFrame(text)
    result = nmea.decode(text)
    if isinstance(result, Rejected):
        assert (result.what, result.reason) in {("nmea", "bad-field"), ("nmea", "unparseable")}
    rx = GnssReceiver(lambda: TABLE)
    rx.feed(text.encode() + b"\r\n", 0)
    rx.finish()
    assert sum(rx.rejected.values()) + sum(rx.ignored.values()) <= 1


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(KNOWN_UBX), st.binary(max_size=200))
def test_arbitrary_ubx_payloads_decode_or_are_rejected(class_id, payload):
    result = ubx.decode(*class_id, payload)
    if isinstance(result, Rejected):
        assert (result.what, result.reason) in {("ubx", "bad-length"), ("ubx", "bad-field")}
    rx = GnssReceiver(lambda: TABLE)
    rx.feed(ubx_frame_bytes(*class_id, payload), 0)
    rx.finish()
    assert rx.frames == {"ubx": 1}


# --- every line is accounted for exactly once ------------------------------------------------------------------
@FAST
@given(stream(), st.lists(st.integers(0, 3000), max_size=5))
def test_every_nmea_segment_and_ubx_frame_is_accounted_for_once(generated, cuts):
    data, nmea_count, frames, sentences = generated
    out = frame_all(split(data, cuts))
    nmea_outputs = [x for x in out if isinstance(x, NmeaFrame) or (isinstance(x, Rejected) and x.what == "nmea")]
    assert len(nmea_outputs) == nmea_count
    assert [x for x in out if isinstance(x, UbxFrame)] == [UbxFrame(f[2], f[3], f[6:-2]) for f in frames]
    assert {x.text for x in out if isinstance(x, NmeaFrame)} <= sentences  # nothing damaged gets through
    assert out == frame_all([data])


@FAST
@given(stream(), st.lists(st.integers(0, 3000), max_size=5))
def test_receiver_counts_each_frame_once_by_what_became_of_it(generated, cuts):
    data = generated[0]
    rx = GnssReceiver(lambda: TABLE)
    for chunk in split(data, cuts):
        rx.feed(chunk, 0)
    rx.finish()
    frames, rejected, ignored = Counter(), Counter(), Counter()
    for item in frame_all([data]):
        if isinstance(item, Rejected):
            rejected[f"{item.what}:{item.reason}"] += 1
            continue
        frames["nmea" if isinstance(item, NmeaFrame) else "ubx"] += 1
        result = nmea.decode(item.text) if isinstance(item, NmeaFrame) else ubx.decode(
            item.msg_class, item.msg_id, item.payload)
        if isinstance(result, Rejected):
            rejected[f"{result.what}:{result.reason}"] += 1
        elif isinstance(result, (nmea.Ignored, ubx.UbxIgnored)):
            ignored[result.kind] += 1
    assert (rx.frames, rx.rejected, rx.ignored) == (frames, rejected, ignored)


@FAST
@given(stream(), st.lists(st.integers(0, 3000), max_size=5))
def test_chunking_does_not_change_what_the_receiver_reports(generated, cuts):
    def run(chunks: list[bytes]) -> tuple:
        rx = GnssReceiver(lambda: TABLE)
        events = [e for chunk in chunks for e in rx.feed(chunk, 0)] + rx.finish()
        return events, rx.snapshot()

    data = generated[0]
    whole, whole_snapshot = run([data])
    chunked, chunked_snapshot = run(split(data, cuts))
    assert chunked == whole
    assert (chunked_snapshot.frames, chunked_snapshot.rejected) == (whole_snapshot.frames, whole_snapshot.rejected)


@FAST
@given(st.lists(st.one_of(stream().map(lambda g: g[0]), line_bytes), min_size=1, max_size=6))
def test_receiver_counters_only_grow(chunks):
    rx = GnssReceiver(lambda: TABLE)
    before = rx.snapshot()
    for i, chunk in enumerate(chunks):
        rx.feed(chunk, i * 700_000_000)
        rx.tick(i * 700_000_000 + 400_000_000)
        now = rx.snapshot()
        for name in ("frames", "rejected", "ignored"):
            old, new = getattr(before, name), getattr(now, name)
            assert all(new.get(key, 0) >= count for key, count in old.items())
        assert now.epochs >= before.epochs
        before = now
