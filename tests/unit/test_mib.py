"""The appliance MIB: it compiles cleanly with net-snmp, libsmi and pysmi, the committed JSON is its compiled form, and
the object table the agent builds from it is consistent (and agrees with the enumerations in the code).

net-snmp's snmptranslate, libsmi's smilint and the standard MIB modules the MIB imports are outside the venv: a
missing one skips those tests locally and fails them under CI, as harness/peers.py ``require`` does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.events import Constellation, ReceiverState, Severity
from appliance.clock.state import ClockState
from appliance.protocol.ptp.fsm import PORT_STATE_CODES as STATE_CODES
from appliance.snmp import mibgen
from harness.missing import missing

REPO = Path(__file__).resolve().parents[2]
MIB_DIR = REPO / "deploy" / "mibs"
PEN = 32473  # the example PEN of RFC 5612




def _tool(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        missing(f"{binary} is not installed (Debian package {package})")
    return str(path)


@pytest.fixture(scope="module")
def base_dirs() -> list[Path]:
    try:
        return mibgen.find_base_mibs()
    except mibgen.MibError as exc:
        missing(str(exc))
        raise


@pytest.fixture(scope="module")
def table() -> list[mibgen.MibObject]:
    return mibgen.load_table()


def _snmptranslate(mib_dir: Path, base: list[Path], tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """snmptranslate on a clean slate: no user or system snmp.conf, a fresh persistent directory (so nothing parsed
    earlier is reused), and only the given MIB directories, the appliance's first."""
    state = tmp_path / "net-snmp"
    (state / "cert_indexes").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MIBS", "MIBDIRS")}
    env.update(SNMPCONFPATH=str(state), SNMP_PERSISTENT_DIR=str(state))
    argv = [_tool("snmptranslate", "snmp"), "-M", os.pathsep.join(map(str, [mib_dir, *base])), "-m", "APPLIANCE-MIB",
            "-Le", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)


def _assert_clean(out: subprocess.CompletedProcess) -> None:
    """No error and no warning; -Pw also reports the MACRO definitions it skips in SNMPv2-SMI/-TC (not ours)."""
    noise = re.compile(r"^[A-Z-]+ MACRO \(lines \d+\.\.\d+ parsed and ignored\)\.$")
    problems = [line for line in out.stderr.splitlines() if line.strip() and not noise.match(line)]
    if out.returncode != 0 or problems:
        pytest.fail(f"snmptranslate exited {out.returncode}:\n{out.stderr}")


def test_snmptranslate_compiles_the_mib_without_warnings(base_dirs: list[Path], tmp_path: Path) -> None:
    out = _snmptranslate(MIB_DIR, base_dirs, tmp_path, "-Pw", "-Tp", "-IR", "applianceMIB")
    _assert_clean(out)
    assert out.stdout.startswith("+--applianceMIB(99999)")
    assert out.stdout.count("-RW-") == 1 and re.search(r"-RW- .*applianceClockForcedHoldover\(11\)", out.stdout)
    oid = _snmptranslate(MIB_DIR, base_dirs, tmp_path, "-On", "APPLIANCE-MIB::applianceClockForcedHoldover.0")
    assert oid.stdout.strip() == ".1.3.6.1.4.1.99999.1.2.11.0"


def test_smilint_finds_nothing(base_dirs: list[Path]) -> None:
    smilint = _tool("smilint", "smitools")
    env = {**os.environ, "SMIPATH": ":".join(map(str, base_dirs))}
    out = subprocess.run([smilint, "-l", "6", "-s", str(MIB_DIR / "APPLIANCE-MIB.txt")], capture_output=True,
                         text=True, timeout=60, env=env, check=False)
    report = (out.stdout + out.stderr).strip()
    if out.returncode != 0 or report:
        pytest.fail(f"smilint exited {out.returncode}:\n{report}")


def _pysmi() -> None:
    try:
        import pysmi  # noqa: F401
    except ImportError:
        missing("pysmi is not installed in the venv (pip install pysmi)")


def test_pysmi_compiles_the_mib(base_dirs: list[Path], tmp_path: Path) -> None:
    _pysmi()
    path = mibgen.compile_mib(tmp_path, mib_dirs=base_dirs)
    assert path.name == "APPLIANCE-MIB.json"
    assert mibgen.load_table(path=path) == mibgen.load_table()


def test_the_committed_json_is_the_compiled_mib(base_dirs: list[Path]) -> None:
    _pysmi()
    env = {**os.environ, mibgen.MIB_DIRS_ENV: os.pathsep.join(map(str, base_dirs))}
    out = subprocess.run([sys.executable, "-m", "appliance.snmp.mibgen", "--check"], capture_output=True, text=True,
                         timeout=120, env=env, cwd=REPO, check=False)
    assert out.returncode == 0, out.stderr


def test_every_object_sits_under_the_module(table: list[mibgen.MibObject]) -> None:
    module = mibgen.enterprise_oid()
    assert module == (1, 3, 6, 1, 4, 1, 99999)
    assert len({o.oid for o in table}) == len(table) and len({o.name for o in table}) == len(table)
    for obj in table:
        assert obj.oid[:7] == module and obj.name.startswith("appliance"), obj
        if obj.kind == "notification":
            assert obj.oid[7:-1] == (0,) and obj.syntax is None and obj.objects, obj
        elif obj.kind == "scalar":
            assert obj.oid[7] == 1 and obj.syntax is not None, obj
        else:
            assert obj.oid[7] == 1 and obj.syntax is not None and obj.table and obj.indices, obj
        if obj.syntax is not None:
            assert obj.syntax.base in set(mibgen.BASE_TYPES.values()), obj


def test_tables_are_indexed_by_their_own_columns(table: list[mibgen.MibObject]) -> None:
    columns = {o.name: o for o in table if o.is_column}
    tables = {o.table for o in columns.values()}
    assert tables == {"applianceSatTable", "applianceConstTable", "applianceOutputTable", "applianceAlarmTable",
                      "appliancePtpPortTable", "applianceRefTable", "applianceReceiverTable"}
    for obj in columns.values():
        for index in obj.indices:
            assert columns[index].table == obj.table and columns[index].access == "not-accessible", (obj, index)
            assert columns[index].syntax.base in ("Integer32", "Unsigned32"), index  # bounded, so no IMPLIED needed
            assert columns[index].syntax.ranges or columns[index].syntax.enums, index
    readable = {t: [c for c in columns.values() if c.table == t and c.access == "read-only"] for t in tables}
    assert all(readable.values()), readable


def test_exactly_one_object_is_writable_and_it_is_forced_holdover(table: list[mibgen.MibObject]) -> None:
    writable = [o for o in table if o.writable]
    assert [o.name for o in writable] == ["applianceClockForcedHoldover"]
    assert writable[0].kind == "scalar" and writable[0].syntax.tc == "TruthValue"
    assert dict(writable[0].syntax.enums) == {"true": 1, "false": 2}


def test_every_notification_names_objects_it_can_carry(table: list[mibgen.MibObject]) -> None:
    by_name = {o.name: o for o in table}
    notifications = [o for o in table if o.kind == "notification"]
    assert {n.name for n in notifications} >= {
        "applianceClockStateChange", "applianceReferenceLost", "applianceReferenceRegained", "applianceHoldoverEntered",
        "applianceHoldoverExpired", "applianceSpoofingAlarm", "applianceSpoofingCleared", "applianceJammingAlarm",
        "applianceJammingCleared", "applianceOutputFaultRaised", "applianceOutputFaultCleared", "applianceAlarmRaised",
        "applianceAlarmCleared"}
    carried = set()
    for n in notifications:
        for name in n.objects:
            assert name in by_name and by_name[name].kind != "notification", (n.name, name)
            assert by_name[name].access != "not-accessible", (n.name, name)
            carried.add(name)
        assert len({by_name[name].table for name in n.objects} - {None}) <= 1, n.name  # one row's instances at most
    notify_only = {o.name for o in table if o.access == "accessible-for-notify"}
    assert notify_only and notify_only <= carried


def test_enumerations_match_the_code(table: list[mibgen.MibObject]) -> None:
    def enums(name: str) -> dict[str, int]:
        return {k.lower(): v for k, v in next(o for o in table if o.name == name).syntax.enums}

    def squash(member: str) -> str:
        return member.replace("_", "").lower()

    assert set(enums("applianceClockState")) == {squash(s.name) for s in ClockState}
    assert set(enums("applianceRcvState")) == {squash(s.name) for s in ReceiverState}
    assert set(enums("applianceSatConstellation")) == {squash(c.name) for c in Constellation}
    assert {squash(s.name) for s in Severity} <= set(enums("applianceAlarmSeverity"))
    ptp = enums("appliancePtpPortState")
    assert all(ptp[squash(state)] == code for state, code in STATE_CODES.items())  # IEEE 1588-2019 Table 20


def test_scaled_objects_carry_their_display_hints(table: list[mibgen.MibObject]) -> None:
    by_name = {o.name: o for o in table}
    assert by_name["applianceClockFrequency"].syntax.display_hint == "d-3"
    assert by_name["applianceClockFrequency"].syntax.base == "Integer32"
    assert by_name["applianceRcvLatitude"].syntax.ranges == ((-900_000_000, 900_000_000),)
    assert by_name["applianceAlarmRaisedTime"].syntax.sizes == ((8, 8), (11, 11))
    assert by_name["applianceClockErrorBound"].syntax.base == "Unsigned32"
    assert by_name["applianceNtpRequests"].syntax.base == "Counter64"


def test_load_table_moves_every_oid_under_another_enterprise(table: list[mibgen.MibObject]) -> None:
    moved = mibgen.load_table(PEN)
    assert [o.name for o in moved] == [o.name for o in table]
    assert all(m.oid == (*mibgen.ENTERPRISES, PEN, *o.oid[7:]) for m, o in zip(moved, table))


def test_render_mib_registers_the_module_under_the_operators_number() -> None:
    text = mibgen.render_mib(PEN)
    assert f"::= {{ enterprises {PEN} }}" in text and "99999" not in text
    assert "PLACEHOLDER" not in text and f"enterprises {PEN}, the" in text
    assert mibgen.render_mib(mibgen.PLACEHOLDER_ENTERPRISE) == (MIB_DIR / "APPLIANCE-MIB.txt").read_text()
    for bad in (0, -1, 2**32, True, "32473"):
        with pytest.raises(ValueError):
            mibgen.render_mib(bad)  # type: ignore[arg-type]


def test_the_rendered_mib_compiles(base_dirs: list[Path], tmp_path: Path) -> None:
    rendered = tmp_path / "mibs"
    rendered.mkdir()
    (rendered / "APPLIANCE-MIB.txt").write_text(mibgen.render_mib(PEN))
    out = _snmptranslate(rendered, base_dirs, tmp_path, "-Pw", "-Tp", "-IR", "applianceMIB")
    _assert_clean(out)
    assert out.stdout.startswith(f"+--applianceMIB({PEN})")
    _pysmi()
    path = mibgen.compile_mib(tmp_path / "json", enterprise=PEN, mib_dirs=base_dirs)
    assert mibgen.load_table(path=path) == mibgen.load_table(PEN)


def test_the_json_is_package_data() -> None:
    path = mibgen.committed_json()
    assert path.is_file() and path.parent == Path(mibgen.__file__).parent / "data"
