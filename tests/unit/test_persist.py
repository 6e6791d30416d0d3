"""Tests for the learned-state file (appliance.edge.persist): round trip, atomic replacement, permissions and
every way a file can be bad (each must give a cold start with a warning, never an exception)."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.edge import persist
from appliance.edge.persist import STATE_FILE, LearnedState, load_state, save_state

GOOD = LearnedState(saved_at_tai_ns=1_700_000_037_000_000_000, oscillator="ocxo", state="LOCKED",
                    frequency_ppb=-123.456789, frequency_sigma_ppb=0.02, aging_ppb_per_s=1.2e-6,
                    aging_sigma_ppb_per_s=3e-8, temp_coeff_ppb_per_k=None, error_bound_ns=40, locked_seconds=86_400)

finite = st.floats(allow_nan=False, allow_infinity=False)
non_negative = st.floats(min_value=0, allow_nan=False, allow_infinity=False)
states = st.builds(
    LearnedState, saved_at_tai_ns=st.integers(), oscillator=st.text(min_size=1), state=st.text(),
    frequency_ppb=finite, frequency_sigma_ppb=non_negative, aging_ppb_per_s=finite, aging_sigma_ppb_per_s=non_negative,
    temp_coeff_ppb_per_k=st.none() | finite, error_bound_ns=st.integers(min_value=0),
    locked_seconds=st.integers(min_value=0))
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=6)


def _temps(state_dir: Path) -> list[Path]:
    return [p for p in state_dir.iterdir() if p.name != STATE_FILE]


def _write_raw(state_dir: Path, data: bytes | str) -> Path:
    state_dir.mkdir(exist_ok=True)
    path = state_dir / STATE_FILE
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _document(**changes: object) -> dict:
    document = dataclasses.asdict(GOOD)
    document.update(changes)
    return document


# --- round trip and format -----------------------------------------------------------------------------------


def test_round_trip(tmp_path):
    path = save_state(tmp_path / "state", GOOD)
    assert path == tmp_path / "state" / STATE_FILE
    assert load_state(tmp_path / "state", "ocxo") == (GOOD, None)


@given(states)
def test_round_trip_is_exact_for_any_valid_state(learned):
    with tempfile.TemporaryDirectory() as directory:
        save_state(Path(directory), learned)
        assert load_state(Path(directory), learned.oscillator) == (learned, None)


def test_unknown_extra_fields_are_ignored_silently(tmp_path):
    _write_raw(tmp_path, json.dumps(_document(humidity_coeff_ppb_per_pct=0.1, notes={"by": "v2"})))
    assert load_state(tmp_path, "ocxo") == (GOOD, None)


def test_integers_in_float_fields_load_as_floats(tmp_path):
    _write_raw(tmp_path, json.dumps(_document(frequency_ppb=-12, temp_coeff_ppb_per_k=3)))
    learned, warning = load_state(tmp_path, "ocxo")
    assert warning is None and learned.frequency_ppb == -12.0 and isinstance(learned.frequency_ppb, float)
    assert isinstance(learned.temp_coeff_ppb_per_k, float)


def test_an_impossible_state_cannot_be_constructed_or_saved():
    with pytest.raises(ValueError, match="frequency_ppb is not a finite number"):
        dataclasses.replace(GOOD, frequency_ppb=float("nan"))
    with pytest.raises(ValueError, match="error_bound_ns must be >= 0"):
        dataclasses.replace(GOOD, error_bound_ns=-1)


# --- atomicity and permissions -------------------------------------------------------------------------------


def test_failed_replace_keeps_the_old_file_and_cleans_its_temp(tmp_path, monkeypatch):
    save_state(tmp_path, GOOD)
    before = (tmp_path / STATE_FILE).read_bytes()

    def refuse(*args: object) -> None:
        raise OSError(errno.EIO, "simulated I/O error")

    monkeypatch.setattr(persist.os, "replace", refuse)
    with pytest.raises(OSError, match=f"cannot save learned clock state to {tmp_path / STATE_FILE}"):
        save_state(tmp_path, dataclasses.replace(GOOD, frequency_ppb=1.0))
    assert (tmp_path / STATE_FILE).read_bytes() == before and _temps(tmp_path) == []


def test_crash_mid_save_leaves_old_file_intact_and_next_save_removes_the_leftover(tmp_path, monkeypatch):
    save_state(tmp_path, GOOD)

    def killed(*args: object) -> None:
        raise KeyboardInterrupt  # stands in for the process dying between the write and the rename

    with monkeypatch.context() as patch:
        patch.setattr(persist.os, "replace", killed)
        patch.setattr(persist, "_discard", lambda path: None)  # a killed process runs no cleanup
        with pytest.raises(KeyboardInterrupt):
            save_state(tmp_path, dataclasses.replace(GOOD, frequency_ppb=1.0))
    assert len(_temps(tmp_path)) == 1  # the half-done save's temp file
    assert load_state(tmp_path, "ocxo") == (GOOD, None)

    newer = dataclasses.replace(GOOD, frequency_ppb=2.0)
    save_state(tmp_path, newer)
    assert _temps(tmp_path) == [] and load_state(tmp_path, "ocxo") == (newer, None)


def test_file_is_fsynced_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src: object, dst: object) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(persist.os, "fsync", fsync)
    monkeypatch.setattr(persist.os, "replace", replace)
    save_state(tmp_path, GOOD)
    assert events == ["fsync file", "replace", "fsync dir"]


def test_modes_are_0600_and_0700_whatever_the_umask(tmp_path):
    old_umask = os.umask(0o277)  # would strip the owner's write bit from both
    try:
        path = save_state(tmp_path / "var" / "state", GOOD)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_existing_directory_keeps_its_mode(tmp_path):
    tmp_path.chmod(0o750)
    save_state(tmp_path, GOOD)
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o750


def test_directory_that_cannot_be_created_is_a_clear_oserror(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(OSError, match=f"cannot create state directory {blocker / 'state'}") as info:
        save_state(blocker / "state", GOOD)
    assert info.value.errno == errno.ENOTDIR
    with pytest.raises(NotADirectoryError, match="exists but is not a directory"):
        save_state(blocker, GOOD)


# --- bad files: cold start with a warning, never an exception --------------------------------------------------


def test_missing_file_is_a_quiet_cold_start_with_a_note(tmp_path):
    assert load_state(tmp_path / "nowhere", "ocxo") == (None, f"no learned clock state in {tmp_path / 'nowhere'}: "
                                                              "cold start")


@pytest.mark.parametrize(("contents", "problem"), [
    (b"", "not valid JSON"),
    (b"{\"version\": 1, \"saved_at", "not valid JSON"),
    (b"\xff\xfe\x00garbage", "not valid JSON"),
    (b"[" * 100_000, "not valid JSON"),  # deep nesting: RecursionError inside json
    (b"[1, 2]", "expected a JSON object, found list"),
    (json.dumps(_document(version=2)).encode(), "unknown format version 2"),
    (json.dumps(_document(version="1")).encode(), "unknown format version '1'"),
    (json.dumps(_document(version=True)).encode(), "unknown format version True"),
    (json.dumps({k: v for k, v in _document().items() if k != "version"}).encode(), "unknown format version None"),
    (json.dumps({k: v for k, v in _document().items() if k not in ("aging_ppb_per_s", "state")}).encode(),
     "missing field(s) state, aging_ppb_per_s"),
    (json.dumps(_document(frequency_ppb="12.5")).encode(), "frequency_ppb must be float, not str"),
    (json.dumps(_document(locked_seconds=True)).encode(), "locked_seconds must be int, not bool"),
    (json.dumps(_document(error_bound_ns=40.0)).encode(), "error_bound_ns must be int, not float"),
    (json.dumps(_document(oscillator=None)).encode(), "oscillator must be str, not NoneType"),
    (json.dumps(_document(frequency_ppb=float("nan"))).encode(), "NaN is not allowed"),
    (json.dumps(_document(aging_ppb_per_s=float("-inf"))).encode(), "-Infinity is not allowed"),
    (json.dumps(_document()).replace("86400", "1e400").encode(), "locked_seconds must be int, not float"),
    (json.dumps(_document()).replace("-123.456789", "1e400").encode(), "frequency_ppb is not a finite number"),
    (json.dumps(_document(frequency_ppb=10**400)).encode(), "frequency_ppb is not a finite number"),
    (json.dumps(_document(frequency_sigma_ppb=-0.1)).encode(), "frequency_sigma_ppb must be >= 0"),
    (json.dumps(_document(oscillator="tcxo")).encode(),
     "learned on oscillator 'tcxo' but the configured oscillator is 'ocxo'"),
    (b" " * (persist._MAX_FILE_BYTES + 1), "larger than"),
])
def test_bad_file_gives_cold_start_with_a_warning_naming_file_and_problem(tmp_path, contents, problem):
    path = _write_raw(tmp_path, contents)
    learned, warning = load_state(tmp_path, "ocxo")
    assert learned is None
    assert warning.startswith(f"{path}: ") and warning.endswith(": cold start")
    assert problem in warning


def test_unreadable_file_gives_a_warning(tmp_path):
    (tmp_path / STATE_FILE).mkdir()  # reading a directory fails even for root
    learned, warning = load_state(tmp_path, "ocxo")
    assert learned is None and "cannot read it" in warning and warning.endswith("cold start")


@settings(max_examples=300)
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_never_raise_and_always_warn(data):
    with tempfile.TemporaryDirectory() as directory:
        path = _write_raw(Path(directory), data)
        learned, warning = load_state(Path(directory), "ocxo")
    assert learned is None and warning.startswith(str(path)) and warning.endswith("cold start")


@given(st.sampled_from([f.name for f in dataclasses.fields(LearnedState)]), json_values)
def test_any_single_field_replaced_by_any_json_value_never_raises(name, value):
    with tempfile.TemporaryDirectory() as directory:
        _write_raw(Path(directory), json.dumps(_document(**{name: value})))
        learned, warning = load_state(Path(directory), "ocxo")
    assert (learned is None) != (warning is None)
    if learned is not None:
        assert learned == dataclasses.replace(GOOD, **{name: value})  # it loaded only because the value is valid
