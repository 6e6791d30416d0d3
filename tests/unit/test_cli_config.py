"""The `appliance check-config` and `appliance config list` commands, as an operator runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from appliance.cli import main
from appliance.config import SETTINGS

GOOD = '[gnss]\nbaud = 115200\n[ptp]\ndomain = 24\n'
BAD = '[gnss]\nbaud = 7\nbogus = 1\n[ntp]\nport = 0\n[web]\nlisten = "nowhere"\n'


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def good(tmp_path) -> str:
    path = tmp_path / "good.toml"
    path.write_text(GOOD, encoding="utf-8")
    return str(path)


@pytest.fixture
def bad(tmp_path) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(BAD, encoding="utf-8")
    return str(path)


def test_check_config_good_file_lists_changes(capsys, good):
    code, out, err = run(capsys, "check-config", good)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"{good}: OK (2 setting(s) differ from the default)"
    assert lines[1:] == ["  gnss.baud = 115200", "  ptp.domain = 24"]


def test_check_config_with_set_override(capsys, good):
    code, out, _ = run(capsys, "check-config", good, "--set", "gnss.baud=9600")
    assert code == 0 and "1 setting(s)" in out and "gnss.baud" not in out


def test_check_config_bad_file_lists_every_problem(capsys, bad):
    code, out, err = run(capsys, "check-config", bad)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 4
    assert all(line.startswith("appliance: config: ") for line in lines)
    for key in ("gnss.baud", "gnss.bogus", "ntp.port", "web.listen"):
        assert sum(key in line for line in lines) == 1, key


def test_check_config_missing_file(capsys, tmp_path):
    missing = str(tmp_path / "nope.toml")
    code, out, err = run(capsys, "check-config", missing)
    assert code == 2 and out == ""
    assert err.strip() == f"appliance: config: {missing}: no such file"


def test_check_config_invalid_toml(capsys, tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[gnss\n", encoding="utf-8")
    code, _, err = run(capsys, "check-config", str(path))
    assert code == 2 and len(err.splitlines()) == 1 and "not valid TOML" in err


def test_config_list_table(capsys):
    code, out, err = run(capsys, "config", "list", "--set", "ntp.port=1123")
    assert code == 0 and err == ""
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "DEFAULT", "CURRENT", "HELP"]
    assert len(rows) == len(SETTINGS)
    by_name = {row.split()[0]: row for row in rows}
    assert set(by_name) == {s.name for s in SETTINGS}
    assert by_name["ntp.port"].split()[1:3] == ["123", "1123*"]
    assert by_name["web.port"].split()[1:3] == ["8443", "8443"]
    assert by_name["clock.oscillator"].split()[1:3] == ['"ocxo"', '"ocxo"']
    assert [r for r in rows if "*" in r.split()[2]] == [by_name["ntp.port"]]


def test_config_list_with_file_marks_file_values(capsys, good):
    _, out, _ = run(capsys, "config", "list", "--config", good)
    marked = sorted(row.split()[0] for row in out.splitlines()[1:] if row.split()[2].endswith("*"))
    assert marked == ["gnss.baud", "ptp.domain"]


def test_config_list_json(capsys):
    code, out, _ = run(capsys, "config", "list", "--json", "--set", "clock.oscillator=rubidium")
    assert code == 0
    rows = json.loads(out)
    assert [r["name"] for r in rows] == [s.name for s in SETTINGS]
    osc = next(r for r in rows if r["name"] == "clock.oscillator")
    assert (osc["default"], osc["value"], osc["origin"]) == ("ocxo", "rubidium", "--set")
    assert {"type", "restart", "allowed", "help"} <= set(osc)


def test_config_list_bad_set_exits_2(capsys):
    code, out, err = run(capsys, "config", "list", "--set", "ptp.profile=bogus", "--set", "foo")
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 2


def test_check_config_as_a_process(bad):
    proc = subprocess.run([sys.executable, "-m", "appliance", "check-config", bad],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 4 and "Traceback" not in proc.stderr


def test_check_config_reads_the_ptp_security_association_file(capsys, tmp_path) -> None:
    sa = tmp_path / "sa.cfg"
    sa.write_text("[security_association]\nspp 2\n1 SHA256-128 HEX:00112233445566778899aabbccddeeff\n")
    conf = tmp_path / "ptp.toml"
    conf.write_text(f'[ptp]\ninterface = "eth1"\nspp = 1\nsa_file = "{sa}"\nactive_key_id = 1\n')
    code, _out, err = run(capsys, "check-config", str(conf))
    assert code != 0 and "ptp.spp 1 is not in the security association file (it has 2)" in err
    assert "00112233" not in err
    conf.write_text(f'[ptp]\ninterface = "eth1"\nspp = 2\nsa_file = "{sa}"\nactive_key_id = 1\n')
    assert run(capsys, "check-config", str(conf))[0] == 0
