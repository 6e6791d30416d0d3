"""What a syslog collector holds of the audit chain, and how the local chain stands against it.

Pure: ``parse_log`` reads lines handed to it (a collector's log file, in any line format that keeps the RFC 5424
structured data, such as rsyslog's ``RSYSLOG_SyslogProtocol23Format``) and ``check_against`` compares the local
chain's (seq, hash, prev_hash) links, handed in oldest first, with what it found.  Neither opens a file.

The local store and its head file can both be replaced by root: with an older copy (a rollback), with nothing (a
deletion), or with a chain started afresh.  Each leaves the local chain verifying on its own; the remote copy of each
record's seq and hash, and of the chain's id (the hash of its record 1), tells them apart:

* ROLLBACK: the remote log holds records beyond the local head, or a record whose hash differs from the local record
  of the same seq (the chain was rolled back and written on from there);
* DELETION: the local chain is missing or empty while the remote log holds records;
* FRESH CHAIN: the remote log holds records of another chain id than the local one.

Gaps in the remote copy (UDP, a dropped queue, a collector that was away) are tolerated and counted: only what the
remote log does hold is compared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from appliance.audit.syslog import SD_ID

OK, ROLLBACK, DELETION, FRESH_CHAIN = "OK", "ROLLBACK", "DELETION", "FRESH CHAIN"
_SD_ELEMENT = re.compile(r"\[" + re.escape(SD_ID) + r'((?:\s+[^\s="\]]+="(?:[^"\\]|\\.)*")*)\s*\]')
_SD_PARAM = re.compile(r'([^\s="\]]+)="((?:[^"\\]|\\.)*)"')
_SD_UNESCAPE = re.compile(r"\\([\"\\\]])")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SEQ = re.compile(r"[1-9][0-9]{0,18}")  # ASCII only (str.isdigit takes "²", which int() refuses), within int64
_MAX_LINE_CHARS = 1 << 20  # a longer line is not one of ours


@dataclass
class ChainCopy:
    """The records of one chain id in the remote log: seq -> (hash, line number) as first seen, and other hashes
    seen later for a seq (a chain rolled back and written on leaves two)."""

    hashes: dict[int, tuple[bytes, int]] = field(default_factory=dict)
    others: dict[int, tuple[bytes, int]] = field(default_factory=dict)
    last_line: int = 0

    def add(self, seq: int, digest: bytes, line: int) -> None:
        seen = self.hashes.setdefault(seq, (digest, line))
        if seen[0] != digest and seq not in self.others:
            self.others[seq] = (digest, line)
        self.last_line = line

    def span(self) -> str:
        return f"seq {min(self.hashes)}..{max(self.hashes)}, {len(self.hashes)} record(s)"


@dataclass
class RemoteLog:
    """What ``parse_log`` found: the records by chain id ("" for records that name none) and the lines that carried
    an ``audit@32473`` element that could not be read."""

    chains: dict[str, ChainCopy] = field(default_factory=dict)
    records: int = 0
    malformed: int = 0
    first_malformed_line: int = 0


@dataclass(frozen=True)
class AnchorResult:
    """The verdict (OK, ROLLBACK, DELETION, FRESH CHAIN), one line saying why, and notes that do not fail it."""

    verdict: str
    reason: str
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.verdict == OK


def parse_log(lines: Iterable[str]) -> RemoteLog:
    """The audit records in a collector's log: every ``[audit@32473 ...]`` element with a seq and a hash; other
    lines (other programs, other formats) are skipped."""
    log = RemoteLog()
    for number, line in enumerate(lines, 1):
        if SD_ID not in line or len(line) > _MAX_LINE_CHARS:
            continue
        match = _SD_ELEMENT.search(line)
        params = {} if match is None else {k: _SD_UNESCAPE.sub(r"\1", v) for k, v in _SD_PARAM.findall(match[1])}
        seq, digest, chain = params.get("seq", ""), params.get("hash", ""), params.get("chain", "")
        if not _SEQ.fullmatch(seq) or not _HEX64.fullmatch(digest) or (chain and not _HEX64.fullmatch(chain)):
            log.malformed += 1
            log.first_malformed_line = log.first_malformed_line or number
            continue
        log.chains.setdefault(chain, ChainCopy()).add(int(seq), bytes.fromhex(digest), number)
        log.records += 1
    return log


def check_against(links: Iterable[tuple[int, str, str]] | None, local_chain: str, remote: RemoteLog,
                  missing: str = "") -> AnchorResult:
    """Compare the local chain (``links``: (seq, hash, prev_hash) oldest first, None when the store is gone, with
    ``missing`` saying how) with the remote log.  ValueError when the remote log holds no audit record."""
    if not remote.records:
        raise ValueError("the remote log holds no audit records")
    notes = [f"{remote.malformed} line(s) carry an {SD_ID} element without a readable seq and hash (the first at "
             f"line {remote.first_malformed_line})"] if remote.malformed else []
    ours = _ours(remote, local_chain)
    walk = _Walk(ours)
    for seq, digest, prev_hash in links or ():
        walk.step(seq, digest, prev_hash)
    if walk.count == 0:
        what = missing or "the store is empty"
        return AnchorResult(DELETION, f"the local audit chain is gone ({what}) but the remote log holds "
                                      f"{_chains_text(remote)}", tuple(notes))
    others = {chain: copy for chain, copy in remote.chains.items() if chain and local_chain and chain != local_chain}
    if others:
        chain, copy = max(others.items(), key=lambda item: item[1].last_line)
        return AnchorResult(FRESH_CHAIN, f"the remote log holds chain {_short(chain)} ({copy.span()}, the last at line "
                                         f"{copy.last_line}), which the local chain {_short(local_chain)} (seq "
                                         f"{walk.first_seq}..{walk.head_seq}) does not continue: the audit store and "
                                         "its head file were deleted or replaced and a new chain started on the box",
                            tuple(notes))
    return walk.verdict(ours, notes)


class _Walk:
    """The local links against the remote copy of their chain, one at a time."""

    def __init__(self, ours: ChainCopy) -> None:
        self.ours = ours
        self.count = self.compared = 0
        self.first_seq = self.head_seq = 0
        self.head_hash = ""
        self.differs: tuple[int, bytes, int, str] | None = None  # seq, remote hash, its line, local hash

    def step(self, seq: int, digest: str, prev_hash: str) -> None:
        if not self.count:
            self.first_seq = seq
            self._compare(seq - 1, prev_hash)  # the record before the store's first: pruned here, maybe held there
        self.count += 1
        self.head_seq, self.head_hash = seq, digest
        if self._compare(seq, digest):
            self.compared += 1

    def _compare(self, seq: int, local_hash: str) -> bool:
        held = self.ours.hashes.get(seq)
        if held is None:
            return False
        for remote_hash, line in (held, self.ours.others.get(seq)) if seq in self.ours.others else (held,):
            if remote_hash.hex() != local_hash and self.differs is None:
                self.differs = (seq, remote_hash, line, local_hash)
        return True

    def verdict(self, ours: ChainCopy, notes: list[str]) -> AnchorResult:
        remote_max = max(ours.hashes) if ours.hashes else 0
        beyond = remote_max > self.head_seq
        if self.differs is not None:
            seq, remote_hash, line, local_hash = self.differs
            also = (f"; the remote log also holds records up to seq {remote_max}, beyond the local head seq "
                    f"{self.head_seq}") if beyond else ""
            return AnchorResult(ROLLBACK, f"record {seq} differs: the remote log holds hash {_short(remote_hash.hex())} "
                                          f"(line {line}) but the local chain holds {_short(local_hash)}: the local "
                                          f"chain was rolled back to before record {seq} and written anew{also}",
                                tuple(notes))
        if beyond:
            remote_hash, line = ours.hashes[remote_max]
            lost = f"record {remote_max} is" if remote_max == self.head_seq + 1 else \
                f"records {self.head_seq + 1}..{remote_max} are"
            return AnchorResult(ROLLBACK, f"the remote log holds records up to seq {remote_max} (hash "
                                          f"{_short(remote_hash.hex())}, line {line}) but the local chain ends at seq "
                                          f"{self.head_seq}: {lost} gone from the box (the store and its head file "
                                          "were replaced with an older copy, or cut short)", tuple(notes))
        return AnchorResult(OK, self._matched(ours), tuple(notes + self._gaps(ours)))

    def _matched(self, ours: ChainCopy) -> str:
        if not self.compared:
            return (f"no record in common to compare: the local chain holds seq {self.first_seq}..{self.head_seq}, "
                    f"the remote log {ours.span() if ours.hashes else 'none of this chain'}")
        held = [seq for seq in ours.hashes if self.first_seq <= seq <= self.head_seq]
        return (f"{self.compared} record(s) of seq {min(held)}..{max(held)} match the remote log hash for hash; local "
                f"head seq {self.head_seq} (hash {_short(self.head_hash)}), remote up to seq {max(ours.hashes)}")

    def _gaps(self, ours: ChainCopy) -> list[str]:
        notes = []
        remote_max = max(ours.hashes, default=0)
        unsent = self.head_seq - max(remote_max, self.first_seq - 1)
        lost = self.count - self.compared - max(unsent, 0)
        if lost > 0:
            notes.append(f"{lost} local record(s) up to seq {remote_max} have no remote copy (lost in transit, "
                         "dropped from a full queue, or sent while forwarding was off)")
        if unsent > 0:
            notes.append(f"the newest {unsent} local record(s) (after seq {self.head_seq - unsent}) have no remote copy "
                         "yet")
        older = sum(1 for seq in ours.hashes if seq < self.first_seq)
        if older:
            notes.append(f"{older} remote record(s) predate the local store's first record {self.first_seq} (pruned "
                         "here, or kept as evidence after a truncation)")
        return notes


def _ours(remote: RemoteLog, local_chain: str) -> ChainCopy:
    """The remote records of the local chain: those naming its id and those naming none; every record when the local
    chain's id is unknown."""
    mine = [copy for chain, copy in remote.chains.items() if not local_chain or chain in ("", local_chain)]
    if len(mine) == 1:
        return mine[0]
    merged = ChainCopy()
    for chain, copy in remote.chains.items():
        if not local_chain or chain in ("", local_chain):
            for seq, (digest, line) in copy.hashes.items():
                merged.add(seq, digest, line)
            for seq, (digest, line) in copy.others.items():
                merged.add(seq, digest, line)
    return merged


def _chains_text(remote: RemoteLog) -> str:
    parts = [f"{'chain ' + _short(chain) if chain else 'records'} ({copy.span()})"
             for chain, copy in sorted(remote.chains.items(), key=lambda item: item[1].last_line)]
    return "; ".join(parts)


def _short(digest: str) -> str:
    return digest[:16] + "..."
