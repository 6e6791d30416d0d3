"""Configuration backup and restore end to end, as an operator does it: back up a running appliance (keys included,
under a passphrase), restore onto a fresh state directory and a configuration file not yet there, and the appliance
started on it comes up with the same settings, console users, API tokens, SNMPv3 users and keys (the console serves
the same certificate, the old token works); an altered archive and a restore under a running appliance are refused.
"""

from __future__ import annotations

import hashlib
import json
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

from harness.procs import ENV, appliance, free_tcp_port, stop, wait_for

REPO = Path(__file__).parents[2]
PASSPHRASE = "a passphrase for the keys"


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", *args], input=stdin, capture_output=True, text=True,
                          env=ENV, cwd=REPO, timeout=120)


def served_certificate(port: int) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", port)))).hexdigest()


def api_status(port: int, token: str) -> int:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = urllib.request.Request(f"https://127.0.0.1:{port}/api/v1/status",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, context=context, timeout=10) as reply:
        return reply.status


def start(state: Path, conf: Path, web: int) -> subprocess.Popen:
    proc = appliance("run", "--config", str(conf), "--set", f"state_dir={state}", "--set", "web.listen=127.0.0.1",
                     "--set", f"web.port={web}", "--set", "clock.warmup_s=0")
    wait_for(state, lambda s: s["outputs"]["web"].get("serving"), timeout_s=90)
    return proc


def test_backup_then_restore_on_a_fresh_state_brings_back_settings_users_and_keys(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    conf_a, conf_b = tmp_path / "a.toml", tmp_path / "etc" / "b.toml"
    conf_a.write_text("[ntp]\nrate_limit_per_s = 20\n")
    assert cli("user", "add", "alice", "--role", "operator", "--password-stdin", "--set", f"state_dir={a}",
               stdin="a-long-password-1\n").returncode == 0
    made = cli("user", "token", "alice", "--set", f"state_dir={a}")
    token = made.stdout.strip().splitlines()[-1]
    assert cli("snmp", "user-add", "nms", "--stdin", "--set", f"state_dir={a}",
               stdin="auth-pass-123\npriv-pass-456\n").returncode == 0
    (a / "console-settings.toml").write_text('snmp.sys_location = "Data hall 2, rack B12"\n')
    web_a = free_tcp_port()
    proc = start(a, conf_a, web_a)
    try:
        cert_a = served_certificate(web_a)
        assert api_status(web_a, token) == 200
        archive = tmp_path / "backup.json"
        done = cli("backup", str(archive), "--keys", "--passphrase-stdin", "--config", str(conf_a),
                   "--set", f"state_dir={a}", stdin=PASSPHRASE + "\n")
        assert done.returncode == 0, done.stderr
        assert "1 console users, 1 API tokens" in done.stdout and "keys (encrypted)" in done.stdout
        assert done.stdout.strip().endswith("audited")  # through the running appliance
        # a restore under a running appliance is refused, and nothing is written
        refused = cli("restore", str(archive), "--yes", "--passphrase-stdin", "--config", str(conf_a), "--set",
                      f"state_dir={a}", stdin=PASSPHRASE + "\n")
        assert refused.returncode == 1 and "the appliance is running" in refused.stderr
    finally:
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    assert archive.stat().st_mode & 0o077 == 0
    text = archive.read_text()
    for secret in ("BEGIN PRIVATE KEY", "auth-pass-123", PASSPHRASE, token):
        assert secret not in text
    assert "backup.created" in cli("audit", "show", "--set", f"state_dir={a}").stdout

    # an altered archive: refused, whatever was changed
    doc = json.loads(text)
    doc["users"]["users"][0]["role"] = "admin"
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(doc))
    bad = cli("restore", str(forged), "--yes", "--config", str(conf_b), "--set", f"state_dir={b}")
    assert bad.returncode == 1 and "altered" in bad.stderr and not conf_b.exists()
    # what a restore would change, shown first; the passphrase opens the keys
    shown = cli("restore", str(archive), "--dry-run", "--config", str(conf_b), "--set", f"state_dir={b}")
    assert shown.returncode == 0, shown.stderr
    assert "console user alice: added (operator)" in shown.stdout
    assert "config.toml: ntp.rate_limit_per_s = 20 (new)" in shown.stdout
    wrong = cli("restore", str(archive), "--yes", "--passphrase-stdin", "--config", str(conf_b),
                "--set", f"state_dir={b}", stdin="not the passphrase\n")
    assert wrong.returncode == 1 and "wrong passphrase" in wrong.stderr and not conf_b.exists()
    conf_b.parent.mkdir()
    done = cli("restore", str(archive), "--yes", "--passphrase-stdin", "--config", str(conf_b),
               "--set", f"state_dir={b}", stdin=PASSPHRASE + "\n")
    assert done.returncode == 0, done.stderr
    assert "key web-key.pem: written" in done.stdout and done.stdout.strip().endswith("audited")
    assert conf_b.read_text() == conf_a.read_text()
    assert (b / "audit-signing.pub").read_bytes() == (a / "audit-signing.pub").read_bytes()

    web_b = free_tcp_port()
    proc = start(b, conf_b, web_b)
    try:
        assert served_certificate(web_b) == cert_a  # the console's own key and certificate came back
        assert api_status(web_b, token) == 200  # and the token made on the first appliance opens this one
    finally:
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    users = cli("user", "list", "--set", f"state_dir={b}")
    assert "alice" in users.stdout and "operator" in users.stdout
    assert "nms" in cli("snmp", "user-list", "--set", f"state_dir={b}").stdout
    settings = cli("config", "list", "--json", "--config", str(conf_b), "--set", f"state_dir={b}")
    values = {row["name"]: row for row in json.loads(settings.stdout)}
    assert values["ntp.rate_limit_per_s"]["value"] == 20
    assert values["snmp.sys_location"]["value"] == "Data hall 2, rack B12"
    assert "restore.applied" in cli("audit", "show", "--set", f"state_dir={b}").stdout
