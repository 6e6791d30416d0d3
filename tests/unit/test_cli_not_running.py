"""A command that talks to the running appliance, with none running where it looks: it says where it looked (the
state directory, the control socket, where that came from) and that it needs the configuration `run` was given."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.cli import main
from harness.procs import ENV

SAME_AS_RUN = "give this command the same --config FILE and --set state_dir=... (or control.socket=...) as " \
              "`appliance run`"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["holdover", "start"], ["world", "block-sky"],
                                     ["integrity", "trust"], ["reference", "pin", "gnss"]])
def test_each_client_command_names_the_state_directory_and_the_configuration_it_needs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    state = tmp_path / "state"
    code, out, err = run(capsys, *command, "--set", f"state_dir={state}")
    assert code == 1 and out == ""
    first, second = err.splitlines()
    assert first == f"appliance: {' '.join(command[:2]) if command[0] != 'status' else 'status'}: the appliance is " \
                    f"not running (no control socket at {state / 'control.sock'})"
    assert second == f"appliance: looked in the state directory {state} (state_dir from --set); if the appliance " \
                     f"runs with another configuration, {SAME_AS_RUN}"


def test_a_state_directory_from_a_file_is_said_to_come_from_that_file(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "appliance.toml"
    config.write_text(f'state_dir = "{tmp_path / "gm"}"\n', encoding="utf-8")
    code, _, err = run(capsys, "status", "--config", str(config))
    assert code == 1 and f"state directory {tmp_path / 'gm'} (state_dir from the file {config})" in err


def test_a_stale_socket_is_not_running_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "control.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))  # bound, never listening: what an appliance that died leaves behind
    code, _, err = run(capsys, "world", "clear-sky", "--set", f"state_dir={tmp_path}")
    assert code == 1 and "stale control socket" in err and f"state directory {tmp_path}" in err


def test_an_explicit_control_socket_is_named_instead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sock = tmp_path / "gm.sock"
    code, _, err = run(capsys, "holdover", "stop", "--set", f"control.socket={sock}")
    assert code == 1 and f"looked for the control socket {sock} (control.socket from --set)" in err


def test_the_real_command_line_with_the_default_state_directory() -> None:
    """As an operator types it, with no --set: the default state directory, under HOME (a short one: a socket's
    path has at most 107 bytes, and pytest's own temporary directories under xdist are longer)."""
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="h", dir="/tmp"))
    try:
        out = subprocess.run([sys.executable, "-m", "appliance", "status"], capture_output=True, text=True,
                             env={**ENV, "HOME": str(tmp_path)}, timeout=60)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)
    assert out.returncode == 1 and out.stdout == ""
    default = tmp_path / ".local" / "state" / "appliance"
    assert f"no control socket at {default / 'control.sock'}" in out.stderr
    assert f"looked in the state directory {default} (state_dir from the default)" in out.stderr
    assert SAME_AS_RUN in out.stderr
