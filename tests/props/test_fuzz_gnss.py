"""Fuzzing the GNSS ingestion from real captures: what a damaged serial line makes of real receiver output.

``test_gnss_fuzz.py`` generates its streams (garbled sentences, random UBX payloads, noise) and proves the framer's
accounting; this file starts from the real captures in ``tests/data/gnss`` (GPSD regression suite: NMEA from five
receivers, UBX from two timing receivers).  Windows of a capture are byte-edited and fed to the receiver; real
sentences and real UBX frames have their bodies edited and their checksums made right again, so the damage reaches
the decoders and the epoch assembler instead of stopping at the checksum.  Contract: ``nmea.decode`` and
``ubx.decode`` return a record, an Ignored, or a Rejected with a known reason; the receiver raises nothing, counts
every frame once, and its epochs carry sane values; ``parse_tod_ms`` returns milliseconds of a day or raises
ValueError; what ``ubx.encode_payload`` builds decodes back to its fields.  Budget: ``fuzzing.py``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st

from appliance import leap
from appliance.edge.input_files import read_capture
from appliance.events import GnssEpoch, Rejected
from appliance.gnss import nmea, ubx
from appliance.gnss.framer import Framer, NmeaFrame, UbxFrame, nmea_sentence_bytes, ubx_frame_bytes
from appliance.gnss.receiver import GnssReceiver
from appliance.gnss.replay import replay_bytes, strip_header
from tests.props.fuzzing import FUZZ, apply_edits, edits, fuzz, mutated

TABLE = leap.LeapTable.load_default()
CAPTURES = {p.name: read_capture(p)[:30_000] for p in sorted((Path(__file__).parents[1] / "data" / "gnss").glob(
    "*.log"))}
NMEA_REASONS = {"bad-field", "unparseable", "bad-checksum"}
UBX_REASONS = {"bad-length", "bad-field"}


def _samples() -> tuple[list[str], list[UbxFrame]]:
    """Up to four real sentences of each talker and type, up to four real frames of each UBX message."""
    by_kind: dict[object, list] = defaultdict(list)
    for data in CAPTURES.values():
        framer = Framer()
        for frame in framer.feed(data) + framer.flush():
            key = frame.text[1:6] if isinstance(frame, NmeaFrame) else (frame.msg_class, frame.msg_id) \
                if isinstance(frame, UbxFrame) else None
            if key is not None and len(by_kind[key]) < 4:
                by_kind[key].append(frame)
    frames = [f for group in by_kind.values() for f in group]
    return [f.text for f in frames if isinstance(f, NmeaFrame)], [f for f in frames if isinstance(f, UbxFrame)]


SENTENCES, UBX_FRAMES = _samples()
assert len(SENTENCES) > 100 and len({(f.msg_class, f.msg_id) for f in UBX_FRAMES}) >= 15


def feed(chunks: list[bytes], step_ns: int = 100_000_000) -> tuple[GnssReceiver, list[object]]:
    rx = GnssReceiver(lambda: TABLE, device="capture")
    events: list[object] = []
    for i, chunk in enumerate(chunks):
        events += rx.feed(chunk, i * step_ns)
        events += rx.tick(i * step_ns + step_ns // 2)
    events += rx.finish()
    return rx, events


def check_epochs(events: list[object]) -> None:
    for epoch in (e for e in events if isinstance(e, GnssEpoch)):
        event("receiver: epoch")
        assert epoch.tai_ns is None or isinstance(epoch.tai_ns, int)
        for sat in epoch.satellites:
            assert sat.elevation_deg is None or -90 <= sat.elevation_deg <= 90


# --- capture windows, byte-edited --------------------------------------------------------------------------------
@st.composite
def capture_windows(draw: st.DrawFn) -> bytes:
    data = CAPTURES[draw(st.sampled_from(sorted(CAPTURES)))]
    start = draw(st.integers(0, len(data) - 1))
    return data[start:start + draw(st.integers(1, 1500))]


@fuzz(0.5)
@given(mutated(capture_windows(), max_edits=6), st.lists(st.integers(1, 600), max_size=4))
def test_the_receiver_takes_damaged_captures(data: bytes, cuts: list[int]) -> None:
    chunks, at = [], 0
    for cut in cuts + [len(data)]:
        chunks.append(data[at:at + cut])
        at += cut
    rx, events = feed(chunks)
    check_epochs(events)
    whole_rx, whole_events = feed([data], step_ns=0)
    # However the line chunked it, every frame is counted once, and by what became of it.
    assert (rx.frames, rx.rejected, rx.ignored) == (whole_rx.frames, whole_rx.rejected, whole_rx.ignored)


@fuzz(0.2)
@given(mutated(capture_windows(), max_edits=6))
def test_replay_takes_damaged_captures(data: bytes) -> None:
    result = replay_bytes(strip_header(b"#x\n" + data), TABLE, chunk=512)
    check_epochs(list(result.epochs))


# --- real sentences, edited, checksum made right -----------------------------------------------------------------
@st.composite
def edited_sentences(draw: st.DrawFn) -> str:
    """A real sentence's body byte-edited (to printable ASCII but '$', '!', '*'), its checksum recomputed."""
    body = draw(st.sampled_from(SENTENCES))[1:-3]
    raw = apply_edits(body.encode(), draw(edits(max_edits=4, max_insert=8)))
    text = "".join(chr(b) if 0x20 <= b < 0x7F and chr(b) not in "$!*" else "," for b in raw)
    return text or "GPRMC"


@FUZZ
@given(edited_sentences())
def test_edited_real_sentences_decode_or_are_rejected(body: str) -> None:
    line = nmea_sentence_bytes(body)
    result = nmea.decode(line.decode("ascii").rstrip())
    if isinstance(result, Rejected):
        event(f"nmea: rejected {result.reason}")
        assert result.what == "nmea" and result.reason in NMEA_REASONS
    else:
        event(f"nmea: {type(result).__name__}")
        assert isinstance(result, (nmea.TimeRecord, nmea.UsedRecord, nmea.ViewRecord, nmea.TextRecord,
                                   nmea.Ignored))
    if isinstance(result, nmea.TimeRecord):
        assert 0 <= result.tod_ms < 86_401_000
    rx, events = feed([line])
    check_epochs(events)
    assert sum(rx.frames.values()) <= 1


# --- real UBX frames, edited, checksum made right ----------------------------------------------------------------
@st.composite
def edited_ubx(draw: st.DrawFn) -> UbxFrame:
    frame = draw(st.sampled_from(UBX_FRAMES))
    payload = apply_edits(frame.payload, draw(edits(max_edits=4)))
    return UbxFrame(frame.msg_class, frame.msg_id, payload[:4096])


@FUZZ
@given(st.lists(edited_ubx(), min_size=1, max_size=4))
def test_edited_real_ubx_frames_decode_or_are_rejected(frames: list[UbxFrame]) -> None:
    for frame in frames:
        result = ubx.decode(frame.msg_class, frame.msg_id, frame.payload)
        if isinstance(result, Rejected):
            event(f"ubx: rejected {result.reason}")
            assert result.what == "ubx" and result.reason in UBX_REASONS
        else:
            event(f"ubx: {ubx.name_of(frame.msg_class, frame.msg_id)}")
    # A receiver sees them in a row, so an edited frame lands inside an epoch the others are building.
    rx, events = feed([ubx_frame_bytes(f.msg_class, f.msg_id, f.payload) for f in frames])
    check_epochs(events)
    assert rx.frames == Counter({"ubx": len(frames)})


# --- fields ----------------------------------------------------------------------------------------------------------
TOD_CHARS = st.sampled_from(list("0123456789.:+- ") + ["\u0661", "60", "235960", "99", ".999", "e"])


@FUZZ
@given(st.one_of(st.text(max_size=14), st.lists(TOD_CHARS, max_size=12).map("".join)))
def test_time_of_day_fields_parse_or_raise_value_error(text: str) -> None:
    try:
        tod_ms = nmea.parse_tod_ms(text)
    except ValueError:
        return
    assert 0 <= tod_ms < 86_401_000
    assert tod_ms < 86_400_000 or text.startswith("235960")


u8, u16, u32 = st.integers(0, 0xFF), st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF)
i8, i32 = st.integers(-128, 127), st.integers(-(2**31), 2**31 - 1)
payloads = st.one_of(
    st.builds(lambda **f: ("TIM-TP", f), tow_ms=u32, tow_sub=u32, qerr_ps=i32, week=u16, flags=u8),
    st.builds(lambda **f: ("NAV-TIMELS", f), itow_ms=u32, current_ls=i8, change=st.integers(-2, 2),
              time_to_event_s=i32, valid=u8),
    st.builds(lambda **f: ("NAV-STATUS", f), itow_ms=u32, gps_fix=u8, flags=u8, flags2=u8),
    st.builds(lambda **f: ("NAV-TIMEGPS", f), itow_ms=u32, ftow_ns=i32, week=st.integers(-(2**15), 2**15 - 1),
              leap_s=i8, valid=u8, tacc_ns=u32),
    st.builds(lambda **f: (f.pop("kind"), f), kind=st.sampled_from(["NAV-TIMEGAL", "NAV-TIMEBDS"]), itow_ms=u32,
              tow_s=u32, ftow_ns=i32, week=st.integers(-(2**15), 2**15 - 1), leap_s=i8, valid=u8, tacc_ns=u32),
    st.builds(lambda **f: ("MON-HW", f), jamming_state=st.integers(0, 3), jam_indicator=u8))
KIND_IDS = {name: key for key, name in ubx.NAMES.items()}


@FUZZ
@given(payloads)
def test_encoded_payloads_decode_to_their_fields(kind_fields: tuple[str, dict[str, int]]) -> None:
    kind, fields = kind_fields
    result = ubx.decode(*KIND_IDS[kind], ubx.encode_payload(kind, **fields))
    if isinstance(result, Rejected):  # only values the decoder refuses: lsChange outside -1..1, a week's overflow
        assert (kind, result.reason) in {("NAV-TIMELS", "bad-field"), ("NAV-TIMEGAL", "bad-field"),
                                         ("NAV-TIMEBDS", "bad-field")}
        return
    if kind == "TIM-TP":
        assert (result.tow_ms, result.tow_sub_ms_frac, result.qerr_ps, result.week) == (
            fields["tow_ms"], fields["tow_sub"], fields["qerr_ps"], fields["week"])
    elif kind == "NAV-TIMELS":
        assert (result.itow_ms, result.current_ls, result.change_s) == (fields["itow_ms"], fields["current_ls"],
                                                                        fields["change"])
    elif kind == "NAV-STATUS":
        assert result.itow_ms == fields["itow_ms"] and result.spoofing_state == (fields["flags2"] >> 3) & 3
    elif kind == "MON-HW":
        assert (result.jamming_state, result.jam_indicator) == (fields["jamming_state"], fields["jam_indicator"])
    else:
        assert (result.itow_ms, result.week, result.leap_s, result.ftow_ns) == (
            fields["itow_ms"], fields["week"], fields["leap_s"], fields["ftow_ns"])
    rx, events = feed([ubx_frame_bytes(*KIND_IDS[kind], ubx.encode_payload(kind, **fields))])
    check_epochs(events)
