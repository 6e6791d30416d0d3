"""Receiver byte stream -> whole NMEA sentences, u-blox UBX frames and Unicore text lines; the rest rejected.

Pure core.  A receiver line can carry NMEA text, binary UBX frames (a timing receiver sends both on one port, with no
newline between them), noise after a baud-rate mismatch, and partial reads.  The framer keeps at most one unfinished
frame of state and resynchronises on the next start byte after any damage, so one bad byte costs one frame.

Unicore receivers answer commands with lines in NMEA framing whose checksum also covers the leading ``$``
(``$command,MODE,response: OK*5D``), and send ASCII logs such as the VERSIONA answer as ``#NAME,header;fields*crc``
with a CRC-32 (or, for a few query answers, an XOR that covers the ``#``).  Both come out as ``UnicoreFrame``, an
``NmeaFrame`` so that a consumer that knows nothing of Unicore counts it and passes it to the NMEA decoder, which
ignores it.  A ``#`` run that is not a whole, checked log is noise, exactly as it was before logs were framed.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from appliance.events import Rejected

NMEA_MAX_LEN = 164  # NMEA 0183 allows 82; proprietary sentences run longer. Beyond twice that is not a sentence.
# The longest Unicore log the appliance asks for, VERSIONA, is under 200 characters; a '#' run without a line end
# by this length is noise.
UNICORE_LOG_MAX_LEN = 512
# Sentence heads of Unicore lines in NMEA framing whose checksum covers the '$' too: command answers, CONFIG/MASK
# query answers and the boot banner ("$devicename,COM1*67").  Every published capture of them agrees.
UNICORE_HEADS = frozenset({"command", "CONFIG", "devicename"})
UBX_MAX_PAYLOAD = 4096
UBX_SYNC = b"\xb5\x62"
# UBX message classes a receiver may send (u-blox interface description, "UBX class IDs"). Anything else after the
# sync bytes is taken for a false sync inside noise rather than waited for.
UBX_CLASSES = frozenset({0x01, 0x02, 0x04, 0x05, 0x06, 0x09, 0x0A, 0x0B, 0x0D, 0x10, 0x13, 0x21, 0x27, 0x28, 0x29})
_BLANK = frozenset(b" \r\n\t\x00")
_STARTS = (ord("$"), ord("!"), UBX_SYNC[0])
_HASH = ord("#")  # starts a Unicore ASCII log, but only where a frame may start: inside a sentence it is text
_PRINTABLE = frozenset(range(0x20, 0x7F)) - {ord("$"), ord("!")}  # what a sentence's body may contain
_HEX = frozenset(b"0123456789ABCDEFabcdef")
_LOG = re.compile(rb"#[A-Z][A-Z0-9]*,[\x20-\x7e]*\*([0-9A-Fa-f]{8}|[0-9A-Fa-f]{2})[ \t]*")


@dataclass(frozen=True, slots=True)
class NmeaFrame:
    text: str  # "$GNRMC,...*hh" without the line ending


@dataclass(frozen=True, slots=True)
class UnicoreFrame(NmeaFrame):
    """A checked Unicore text line: a command answer (``$command,...*hh``), a query answer (``$CONFIG,...*hh``) or
    an ASCII log (``#VERSIONA,...;...*xxxxxxxx``), without the line ending."""


@dataclass(frozen=True, slots=True)
class UbxFrame:
    msg_class: int
    msg_id: int
    payload: bytes


Frame = NmeaFrame | UbxFrame


def nmea_checksum(body: bytes) -> int:
    value = 0
    for byte in body:
        value ^= byte
    return value


def unicore_crc32(data: bytes) -> int:
    """The CRC-32 of Unicore (and NovAtel) ASCII logs: reflected polynomial 0xEDB88320, register starting at 0 and
    no final inversion, over the characters between '#' and '*'.  zlib's CRC-32 inverts both ends; undo that."""
    return zlib.crc32(data, 0xFFFFFFFF) ^ 0xFFFFFFFF


def ubx_checksum(data: bytes) -> tuple[int, int]:
    """8-bit Fletcher over class, id, length and payload (u-blox interface description, "UBX checksum")."""
    ck_a = ck_b = 0
    for byte in data:
        ck_a = (ck_a + byte) & 0xFF
        ck_b = (ck_b + ck_a) & 0xFF
    return ck_a, ck_b


def ubx_frame_bytes(msg_class: int, msg_id: int, payload: bytes) -> bytes:
    """Encode a UBX frame (used by the simulated receiver and by tests)."""
    body = bytes((msg_class, msg_id)) + len(payload).to_bytes(2, "little") + payload
    return UBX_SYNC + body + bytes(ubx_checksum(body))


def nmea_sentence_bytes(body: str) -> bytes:
    """``"GNRMC,..."`` -> ``b"$GNRMC,...*hh\\r\\n"`` (used by the simulated receiver and by tests)."""
    return f"${body}*{nmea_checksum(body.encode('ascii')):02X}\r\n".encode("ascii")


class Framer:
    """Feed bytes in any chunking; get back frames and rejections in stream order."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._junk = 0  # length of the noise run being skipped, reported once when it ends

    def feed(self, data: bytes) -> list[Frame | Rejected]:
        self._buf += data
        out: list[Frame | Rejected] = []
        while self._buf:
            if not self._step(out):
                break
        return out

    def flush(self) -> list[Frame | Rejected]:
        """End of stream: whatever is left is an unfinished frame or noise."""
        out: list[Frame | Rejected] = []
        rest = bytes(self._buf).strip(bytes(_BLANK))
        if rest[:1] == b"#":  # an unfinished log line is no frame: it joins the noise before it
            self._junk += sum(1 for b in rest if b not in _BLANK)
            rest = b""
        self._end_junk(out)  # the noise came before the unfinished frame: keep stream order
        if rest:
            what = "ubx" if rest.startswith(UBX_SYNC) else "nmea" if rest[:1] in (b"$", b"!") else "bytes"
            out.append(Rejected(what, "truncated", _preview(rest)))
        self._buf.clear()
        return out

    def _step(self, out: list[Frame | Rejected]) -> bool:
        """Consume one frame or one run of noise from the buffer; False when more bytes are needed."""
        first = self._buf[0]
        if first in (0x24, 0x21):  # '$' or '!'
            return self._take_nmea(out)
        if first == _HASH:
            return self._take_log(out)
        if first == UBX_SYNC[0]:
            if len(self._buf) < 2:
                return False
            if self._buf[1] == UBX_SYNC[1]:
                return self._take_ubx(out)
        self._skip_noise(out)
        return True

    def _skip_noise(self, out: list[Frame | Rejected]) -> None:
        end = 1
        while end < len(self._buf) and not self._may_start_frame(end):
            end += 1
        run = self._buf[:end]
        self._junk += sum(1 for b in run if b not in _BLANK)
        del self._buf[:end]
        if self._buf and self._buf[0] not in (UBX_SYNC[0], _HASH):
            # A sentence starts: the noise run is over.  A lone 0xB5 at the end of the buffer, or a '#', may still
            # turn out to be noise, so the run stays open; otherwise how the bytes were chunked would change the
            # noise count.
            self._end_junk(out)

    def _may_start_frame(self, i: int) -> bool:
        """Whether the byte at ``i`` can begin a frame: '$', '!', '#', or 0xB5 not followed by anything but 0x62."""
        byte = self._buf[i]
        if byte != UBX_SYNC[0]:
            return byte in _STARTS or byte == _HASH
        return i + 1 >= len(self._buf) or self._buf[i + 1] == UBX_SYNC[1]

    def _end_junk(self, out: list[Frame | Rejected]) -> None:
        if self._junk:
            out.append(Rejected("bytes", "noise", f"{self._junk} bytes between frames"))
            self._junk = 0

    def _take_nmea(self, out: list[Frame | Rejected]) -> bool:
        buf = self._buf
        limit = min(len(buf), NMEA_MAX_LEN + 2)
        for i in range(1, limit):
            byte = buf[i]
            # A sentence that already has its "*hh" is whole even when a UBX frame follows with no line ending.
            ended = byte not in _PRINTABLE and i >= 3 and buf[i - 3] == 0x2A
            if byte in (0x0D, 0x0A) or ended:
                line = bytes(buf[:i])
                del buf[:i]
                self._end_junk(out)
                out.append(_check_nmea(line))
                return True
            if byte in _STARTS or byte not in _PRINTABLE:
                # A new frame (or binary) began before this sentence ended: the sentence lost its tail.
                reason = "truncated" if byte in _STARTS else "non-ascii"
                self._end_junk(out)
                out.append(Rejected("nmea", reason, _preview(bytes(buf[:i]))))
                del buf[: i if byte in _STARTS else i + 1]
                return True
        if len(buf) > NMEA_MAX_LEN + 1:
            self._end_junk(out)
            out.append(Rejected("nmea", "overlong", _preview(bytes(buf[:40]))))
            del buf[:NMEA_MAX_LEN]
            return True
        return False

    def _take_log(self, out: list[Frame | Rejected]) -> bool:
        """A Unicore ASCII log runs from '#' to the line end (or, whole, to the next frame); anything else that
        starts with '#' is noise, of which only the '#' is taken here so that a log right behind it is still found."""
        buf = self._buf
        for i in range(1, min(len(buf), UNICORE_LOG_MAX_LEN + 2)):
            if buf[i] not in _PRINTABLE:  # a line end, a frame start or binary: the candidate ends here
                frame = _check_log(bytes(buf[:i]))
                if frame is not None:
                    del buf[:i]
                    self._end_junk(out)
                    out.append(frame)
                    return True
                break
        else:
            if len(buf) <= UNICORE_LOG_MAX_LEN + 1:
                return False  # no end yet: wait for more bytes
        self._junk += 1
        del buf[:1]
        return True

    def _take_ubx(self, out: list[Frame | Rejected]) -> bool:
        buf = self._buf
        if len(buf) < 6:
            return False
        msg_class, msg_id = buf[2], buf[3]
        length = int.from_bytes(buf[4:6], "little")
        if msg_class not in UBX_CLASSES or length > UBX_MAX_PAYLOAD:
            self._end_junk(out)
            out.append(Rejected("ubx", "bad-header", f"class 0x{msg_class:02x} length {length}"))
            del buf[:2]
            return True
        if len(buf) < 8 + length:
            return False
        body = bytes(buf[2 : 6 + length])
        if bytes(ubx_checksum(body)) != bytes(buf[6 + length : 8 + length]):
            self._end_junk(out)
            out.append(Rejected("ubx", "bad-checksum", f"class 0x{msg_class:02x} id 0x{msg_id:02x}"))
            del buf[:2]  # the sync may have been false: look for the next one inside this frame
            return True
        del buf[: 8 + length]
        self._end_junk(out)
        out.append(UbxFrame(msg_class, msg_id, body[4:]))
        return True


def _check_nmea(line: bytes) -> NmeaFrame | Rejected:
    star = line.rfind(b"*")
    if star < 0:
        return Rejected("nmea", "no-checksum", _preview(line))
    given, after = line[star + 1 : star + 3], line[star + 3 :]
    # Exactly two hex digits (int() would also take "+5" or " 5"), then at most trailing blanks.
    well_formed = len(given) == 2 and all(c in _HEX for c in given) and not after.strip(bytes(_BLANK))
    unicore = line[1:].split(b",", 1)[0].decode("ascii") in UNICORE_HEADS
    sums = (nmea_checksum(line[1:star]), nmea_checksum(line[:star])) if unicore else (nmea_checksum(line[1:star]),)
    if not well_formed or int(given, 16) not in sums:
        return Rejected("nmea", "bad-checksum", _preview(line))
    return (UnicoreFrame if unicore else NmeaFrame)(line[: star + 3].decode("ascii"))


def _check_log(line: bytes) -> UnicoreFrame | None:
    """``#NAME,...*`` and a CRC-32 (8 hex digits) over what lies between '#' and '*', or an XOR (2 hex digits) over
    the '#' and all up to '*' (the MODE query's answer); None if it is not such a line."""
    match = _LOG.fullmatch(line)
    if match is None:
        return None
    star, given = match.start(1) - 1, int(match.group(1), 16)
    expected = unicore_crc32(line[1:star]) if len(match.group(1)) == 8 else nmea_checksum(line[:star])
    return UnicoreFrame(line[: match.end(1)].decode("ascii")) if given == expected else None


def _preview(data: bytes) -> str:
    return data[:48].decode("ascii", "backslashreplace")
