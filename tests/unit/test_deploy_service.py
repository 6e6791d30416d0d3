"""The system service in deploy/: the unit is valid for systemd, stays as locked down as measured, grants exactly the
capabilities the appliance needs and runs what install.sh installs; install.sh is POSIX sh and its dry run changes
nothing (it runs under a temporary DESTDIR, so the tests never touch /etc, /opt or /var for real)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from harness.missing import missing

DEPLOY = Path(__file__).parents[2] / "deploy"
UNIT = DEPLOY / "appliance.service"
INSTALL = DEPLOY / "install.sh"

CAPABILITIES = {"CAP_NET_BIND_SERVICE", "CAP_SYS_TIME", "CAP_NET_RAW", "CAP_NET_ADMIN"}
# `systemd-analyze security --offline=true deploy/appliance.service` measured 2.8 ("OK") with systemd 252 (Debian 12).
# What is left is what a time server needs: the network, CAP_SYS_TIME and @clock, devices, packet sockets.
EXPOSURE_BOUND = 2.8
# Paths a real install writes; a dry run must leave each as it was.
REAL_PATHS = ("/opt/appliance", "/etc/appliance", "/var/lib/appliance", "/etc/systemd/system/appliance.service",
              "/etc/udev/rules.d/60-appliance.rules")


def systemd_analyze() -> str:
    """Its path; missing, the test is skipped locally and fails under CI (as harness/peers.py `require`)."""
    path = shutil.which("systemd-analyze") or next(
        (p for p in ("/usr/bin/systemd-analyze", "/bin/systemd-analyze") if os.access(p, os.X_OK)), None)
    if path is None:
        missing("systemd-analyze is not installed (Debian: systemd)")
    return path


def directives(text: str) -> list[tuple[str, str, str, int]]:
    """(section, key, value, line number) of every assignment, in order (a key may repeat)."""
    out, section = [], ""
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, sep, value = line.partition("=")
        assert sep, f"appliance.service:{number}: not an assignment: {line}"
        out.append((section, key.strip(), value.strip(), number))
    return out


def values(key: str, section: str = "Service") -> list[str]:
    return [v for s, k, v, _ in directives(UNIT.read_text()) if s == section and k == key]


def one(key: str, section: str = "Service") -> str:
    found = values(key, section)
    assert len(found) == 1, f"{key}= appears {len(found)} times in [{section}]"
    return found[0]


def exec_start() -> tuple[str, list[str]]:
    program, *args = one("ExecStart").split()
    return program, args


def dry_run(root: Path) -> str:
    env = {**os.environ, "DESTDIR": str(root), "LC_ALL": "C"}
    out = subprocess.run([INSTALL, "--dry-run"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, f"install.sh --dry-run exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}


# --- the unit ---------------------------------------------------------------------------------------------------

def test_systemd_accepts_every_directive(tmp_path: Path) -> None:
    # The program and the user exist only once installed: verify a copy whose ExecStart is /bin/true.  `verify`
    # exits 0 even for an unknown key or a bad value, so stderr must not mention the unit at all.
    program, args = exec_start()
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text().replace(f"ExecStart={program} ", "ExecStart=/bin/true ", 1))
    out = subprocess.run([systemd_analyze(), "verify", "--man=no", str(copy)], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "LC_ALL": "C"})
    complaints = [line for line in out.stderr.splitlines() if UNIT.name in line]
    assert out.returncode == 0 and not complaints, f"systemd-analyze verify:\n{out.stdout}\n{out.stderr}"


def test_exposure_stays_at_or_below_the_measured_score() -> None:
    out = subprocess.run([systemd_analyze(), "security", "--offline=true", "--no-pager", str(UNIT)],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "LC_ALL": "C"})
    found = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", out.stdout)
    assert found, f"no exposure score from systemd-analyze security:\n{out.stdout}\n{out.stderr}"
    assert float(found.group(1)) <= EXPOSURE_BOUND, out.stdout


def test_grants_exactly_the_four_capabilities() -> None:
    ambient = one("AmbientCapabilities").split()
    bounding = one("CapabilityBoundingSet").split()
    assert sorted(ambient) == sorted(CAPABILITIES) and sorted(bounding) == sorted(CAPABILITIES)
    assert one("NoNewPrivileges") == "yes"


def test_runs_as_the_dedicated_user_with_private_persistent_state() -> None:
    assert one("User") == "appliance" and one("Group") == "appliance"
    assert not values("DynamicUser"), "DynamicUser: the user ID may change, the state and keys must stay its own"
    assert one("SupplementaryGroups") == "dialout"
    assert one("StateDirectory") == "appliance" and one("StateDirectoryMode") == "0750"
    assert one("ConfigurationDirectory") == "appliance"
    assert one("ProtectSystem") == "strict" and one("ProtectHome") == "yes" and one("PrivateTmp") == "yes"
    assert one("MemoryDenyWriteExecute") == "yes" and one("SystemCallArchitectures") == "native"
    assert set(one("RestrictAddressFamilies").split()) == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_PACKET",
                                                          "AF_NETLINK"}
    assert not values("ProtectClock") and not values("PrivateDevices"), "the appliance steers the clock with devices"
    assert one("Restart") == "on-failure"
    assert one("After", "Unit") == "network-online.target" and one("Wants", "Unit") == "network-online.target"


def test_devices_closed_but_for_receiver_pps_phc_and_gpio() -> None:
    assert one("DevicePolicy") == "closed"
    allowed = {v.split()[0] for v in values("DeviceAllow")}
    assert {"char-pps", "char-ptp", "char-gpiochip", "char-ttyS", "char-ttyUSB", "char-ttyACM"} <= allowed
    # device classes, and one device by name: the CPU wake-up latency request, written only
    assert all(v.startswith("char-") for v in allowed - {"/dev/cpu_dma_latency"}), allowed
    assert "/dev/cpu_dma_latency w" in values("DeviceAllow")


def test_every_directive_says_why() -> None:
    lines = UNIT.read_text().splitlines()
    for _, key, _, number in directives(UNIT.read_text()):
        assert lines[number - 2].startswith("#"), f"appliance.service:{number}: {key}= has no comment above it"


# --- install.sh -------------------------------------------------------------------------------------------------

def test_install_sh_is_posix_sh() -> None:
    text = INSTALL.read_text()
    assert text.startswith("#!/bin/sh\n") and "\nset -eu\n" in text
    assert os.access(INSTALL, os.X_OK)
    out = subprocess.run(["sh", "-n", str(INSTALL)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr


def test_execstart_runs_what_install_sh_installs(tmp_path: Path) -> None:
    program, args = exec_start()
    assert program.endswith("/bin/appliance") and args[0] == "run"
    config = args[args.index("--config") + 1]
    venv = program.removesuffix("/bin/appliance")
    root = tmp_path / "root"
    text = dry_run(root)
    assert f"-m venv {root}{venv}\n" in text
    assert f"+ {root}{venv}/bin/pip install " in text
    assert f"{root}{config}\n" in text  # the configuration ExecStart names is the one installed
    assert f"+ install -m 0644 {DEPLOY / UNIT.name} {root}/etc/systemd/system/{UNIT.name}\n" in text
    user = one("User")
    assert re.search(rf"useradd --system --gid {user} --home-dir /var/lib/{one('StateDirectory')} .* {user}\n",
                     text)


def test_dry_run_lists_the_steps_and_creates_nothing(tmp_path: Path) -> None:
    before = {p: os.path.lexists(p) for p in REAL_PATHS}
    root = tmp_path / "root"
    text = dry_run(root)
    assert not root.exists(), "a dry run made the install root"
    assert {p: os.path.lexists(p) for p in REAL_PATHS} == before
    assert "dry run" in text and "nothing was changed" in text
    for step in ("1. system user and group appliance", "2. state directory /var/lib/appliance",
                 "3. program: virtual environment /opt/appliance/venv", "4. configuration /etc/appliance/appliance.toml",
                 "5. devices:", "6. systemd unit /etc/systemd/system/appliance.service"):
        assert f"\n{step}" in text, step
    assert "systemctl daemon-reload" in text
    assert "systemctl enable --now appliance" in text  # told, never done
    assert "/var/lib/appliance/initial-admin-password" in text
    assert ("sudo -u appliance /opt/appliance/venv/bin/appliance user add NAME --role admin "
            "--config /etc/appliance/appliance.toml") in text


def test_never_starts_a_service(tmp_path: Path) -> None:
    text = dry_run(tmp_path / "root")
    commands = [line for line in text.splitlines() if re.match(r"(\+ |- skipped \([^)]*\): )systemctl ", line)]
    assert commands and all(line.endswith("systemctl daemon-reload") for line in commands), commands
    code = re.sub(r"<<'?EOF'?\n.*?\nEOF\n", "\n", INSTALL.read_text(), flags=re.S)  # printed text aside
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#"))
    assert re.findall(r"\bsystemctl\s+(\S+)", code) == ["daemon-reload"] * len(re.findall(r"\bsystemctl\b", code))


def test_an_existing_configuration_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "root"
    mine = root / "etc/appliance/appliance.toml"
    mine.parent.mkdir(parents=True)
    mine.write_text('state_dir = "/srv/time"\n')
    before = tree(root)
    text = dry_run(root)
    assert tree(root) == before and mine.read_text() == 'state_dir = "/srv/time"\n'
    assert f"= {mine} exists: kept, never overwritten" in text
    assert f"deploy/appliance.toml {mine}" not in text
