"""The appliance MIB as data: render it for an enterprise number, compile it with pysmi, and load the object table.

deploy/mibs/APPLIANCE-MIB.txt is the one place where the appliance's OIDs, types, access and notifications are
written.  pysmi compiles it to JSON (appliance/snmp/data/APPLIANCE-MIB.json, committed, and checked to be up to
date by the tests); the agent reads that JSON through ``load_table`` and builds its object table from it, so no OID
is written in code.

File I/O only (the MIB, its JSON, pysmi's temporary output); no sockets, threads or clock reads.  pysmi is imported
only to compile, so the running appliance needs the JSON and nothing else.

    python -m appliance.snmp.mibgen --check        recompile; exit 1 if the committed JSON is stale
    python -m appliance.snmp.mibgen --write        recompile and refresh the committed JSON
    python -m appliance.snmp.mibgen --render PEN   print the MIB under enterprises PEN
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.resources
import json
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB_NAME = "APPLIANCE-MIB"
PLACEHOLDER_ENTERPRISE = 99999  # not an IANA-assigned number: operators render the MIB with their own
ENTERPRISES = (1, 3, 6, 1, 4, 1)
REPO = Path(__file__).resolve().parents[2]
MIB_SOURCE = REPO / "deploy" / "mibs" / f"{MIB_NAME}.txt"
JSON_NAME = f"{MIB_NAME}.json"
BASE_MODULES = ("SNMPv2-SMI", "SNMPv2-TC", "SNMPv2-CONF")  # what the MIB imports; needed to compile it
MIB_DIRS_ENV = "APPLIANCE_MIB_DIRS"  # extra directories holding the standard MIBs, os.pathsep-separated
STANDARD_DIRS = (REPO / "deploy" / "mibs" / "ietf", REPO / ".cache" / "ietf-mibs", Path("/usr/share/snmp/mibs/ietf"), Path("/usr/share/snmp/mibs"),
                 Path("/var/lib/mibs/ietf"), Path("/usr/share/mibs/ietf"))
MIB_EXTENSIONS = ("", ".txt", ".mib", ".my")

# The SNMPv2-TC conventions the MIB uses (RFC 2579 section 2): they are imported, so the JSON names them only.
STANDARD_TCS: dict[str, dict[str, Any]] = {
    "DisplayString": {"type": "OCTET STRING", "size": ((0, 255),), "hint": "255a"},
    "TruthValue": {"type": "INTEGER", "enums": (("true", 1), ("false", 2))},
    "DateAndTime": {"type": "OCTET STRING", "size": ((8, 8), (11, 11)), "hint": "2d-1d-1d,1d:1d:1d.1d,1a1d:1d"},
}
BASE_TYPES = {"INTEGER": "Integer32", "Integer32": "Integer32", "Unsigned32": "Unsigned32", "Gauge32": "Gauge32",
              "Counter32": "Counter32", "Counter64": "Counter64", "TimeTicks": "TimeTicks", "IpAddress": "IpAddress",
              "OCTET STRING": "OCTET STRING", "OBJECT IDENTIFIER": "OBJECT IDENTIFIER", "Bits": "Bits",
              "Opaque": "Opaque"}


class MibError(Exception):
    """The MIB could not be compiled (missing standard MIBs, a syntax error, a pysmi warning)."""


@dataclass(frozen=True)
class MibSyntax:
    """An object's type with its textual convention resolved: ``base`` is the SMIv2 base type (an enumerated
    INTEGER is Integer32), the constraints are the object's own where it refines its convention."""

    base: str
    tc: str | None = None  # the textual convention, e.g. "TruthValue", "ApplianceMilliPpb"
    enums: tuple[tuple[str, int], ...] = ()  # named numbers, by value
    ranges: tuple[tuple[int, int], ...] = ()  # allowed values; empty: the base type's whole range
    sizes: tuple[tuple[int, int], ...] = ()  # allowed OCTET STRING lengths; empty: any
    display_hint: str | None = None

    def value_of(self, name: str) -> int:
        return dict(self.enums)[name]

    def name_of(self, value: int) -> str:
        return {v: k for k, v in self.enums}[value]


@dataclass(frozen=True)
class MibObject:
    """A scalar, a table column or a notification of the MIB.

    Columns carry their table's name and its INDEX objects (in order; ``implied`` for an IMPLIED last index);
    notifications carry their OBJECTS (varbinds, in order) and no syntax or access."""

    name: str
    oid: tuple[int, ...]
    kind: str  # "scalar", "column" or "notification"
    syntax: MibSyntax | None
    access: str  # "read-only", "read-write", "not-accessible", "accessible-for-notify"; "" for a notification
    table: str | None = None
    indices: tuple[str, ...] = ()
    implied: bool = False
    objects: tuple[str, ...] = ()
    units: str = ""
    description: str = ""

    @property
    def is_column(self) -> bool:
        return self.kind == "column"

    @property
    def writable(self) -> bool:
        return self.access in ("read-write", "read-create")


def enterprise_oid(enterprise: int = PLACEHOLDER_ENTERPRISE) -> tuple[int, ...]:
    """The OID of the module (``applianceMIB``) under ``enterprise``."""
    return (*ENTERPRISES, _check_enterprise(enterprise))


def render_mib(enterprise: int) -> str:
    """The MIB text with the module registered under ``enterprises <enterprise>`` instead of the placeholder, and the
    placeholder's warning in the module DESCRIPTION replaced by a note naming the operator's number."""
    _check_enterprise(enterprise)
    if not MIB_SOURCE.is_file():
        raise FileNotFoundError(f"the MIB source {MIB_SOURCE} is missing (it ships with the appliance's source tree)")
    text = MIB_SOURCE.read_text(encoding="ascii")
    if enterprise == PLACEHOLDER_ENTERPRISE:
        return text
    anchor = f"::= {{ enterprises {PLACEHOLDER_ENTERPRISE} }}"
    if text.count(anchor) != 1:
        raise MibError(f"{MIB_SOURCE}: expected exactly one '{anchor}'")
    note = (f"ENTERPRISE NUMBER: this copy of the module is registered under enterprises {enterprise}, the\n"
            "         private enterprise number of the operator who rendered it from the appliance's placeholder copy.")
    text, found = re.subn(r"PLACEHOLDER ENTERPRISE NUMBER:.*?(?=\n\s*\n)", note, text, count=1, flags=re.DOTALL)
    if not found:
        raise MibError(f"{MIB_SOURCE}: the PLACEHOLDER ENTERPRISE NUMBER paragraph is missing")
    return text.replace(anchor, f"::= {{ enterprises {enterprise} }}")


def _check_enterprise(enterprise: int) -> int:
    if isinstance(enterprise, bool) or not isinstance(enterprise, int) or not 1 <= enterprise <= 0xFFFFFFFF:
        raise ValueError(f"a private enterprise number is an integer from 1 to 4294967295, got {enterprise!r}")
    return enterprise


def standard_mib_dirs(extra: Sequence[str | Path] = ()) -> list[Path]:
    """Existing directories that may hold the standard MIBs: ``extra``, $APPLIANCE_MIB_DIRS, then the usual places."""
    env = [p for p in os.environ.get(MIB_DIRS_ENV, "").split(os.pathsep) if p]
    out: list[Path] = []
    for d in (*map(Path, extra), *map(Path, env), *STANDARD_DIRS):
        if d.is_dir() and d.resolve() not in {o.resolve() for o in out}:
            out.append(d)
    return out


def find_base_mibs(dirs: Sequence[str | Path] | None = None) -> list[Path]:
    """The directories that hold the modules the MIB imports (SNMPv2-SMI, -TC, -CONF); MibError naming the missing
    ones when some are nowhere (Debian ships them in no main package: see the error's hint)."""
    searched = standard_mib_dirs() if dirs is None else [Path(d) for d in dirs]
    found: dict[str, Path] = {}
    for module in BASE_MODULES:
        for d in searched:
            if any((d / f"{module}{ext}").is_file() for ext in MIB_EXTENSIONS):
                found.setdefault(module, d)
                break
    missing = [m for m in BASE_MODULES if m not in found]
    if missing:
        raise MibError(f"standard MIB modules {', '.join(missing)} not found in {[str(d) for d in searched] or 'no'} "
                       f"directory; put RFC 2578/2579/2580's modules (e.g. net-snmp's mibs/ directory) in a directory "
                       f"named by ${MIB_DIRS_ENV}")
    return list(dict.fromkeys(found.values()))


def compile_mib(out_dir: str | Path, *, enterprise: int = PLACEHOLDER_ENTERPRISE,
                mib_dirs: Sequence[str | Path] | None = None) -> Path:
    """Compile the MIB (rendered for ``enterprise``) with pysmi's JSON code generator into
    ``out_dir``/APPLIANCE-MIB.json, strictly: SMIv2 parser, every pysmi warning an error.  The JSON is written with
    sorted keys and without pysmi's host/time comments, so that a recompile of the same MIB gives the same bytes."""
    from pysmi.codegen import JsonCodeGen
    from pysmi.compiler import MibCompiler
    from pysmi.parser import SmiV2Parser
    from pysmi.reader import FileReader
    from pysmi.searcher import StubSearcher
    from pysmi.writer import FileWriter

    base_dirs = find_base_mibs(mib_dirs)
    out = Path(out_dir)
    with tempfile.TemporaryDirectory(prefix="mibgen-") as tmp:
        src, raw = Path(tmp, "src"), Path(tmp, "json")
        src.mkdir()
        (src / f"{MIB_NAME}.txt").write_text(render_mib(enterprise), encoding="ascii")
        compiler = MibCompiler(SmiV2Parser(), JsonCodeGen(), FileWriter(str(raw)).set_options(suffix=".json"))
        compiler.add_sources(FileReader(str(src), recursive=False),
                             *(FileReader(str(d), recursive=False) for d in base_dirs))
        compiler.add_searchers(StubSearcher(*JsonCodeGen.baseMibs))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = compiler.compile(MIB_NAME, genTexts=True, rebuild=True, noDeps=True)
        failed = {name: f"{status} {getattr(status, 'error', '') or ''}".strip()
                  for name, status in results.items() if status in ("failed", "missing")}
        if results.get(MIB_NAME) != "compiled" or failed:
            raise MibError(f"pysmi could not compile {MIB_NAME}: {failed or results}")
        if caught:
            raise MibError(f"pysmi warned compiling {MIB_NAME}: {[str(w.message) for w in caught]}")
        data = json.loads((raw / JSON_NAME).read_text(encoding="utf-8"))
    note = (f"Compiled by pysmi from deploy/mibs/{MIB_NAME}.txt (enterprise {enterprise}) with "
            "python -m appliance.snmp.mibgen --write; do not edit")
    data["meta"]["comments"] = [note]
    out.mkdir(parents=True, exist_ok=True)
    target = out / JSON_NAME
    target.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return target


def committed_json() -> Path:
    """The committed compiled MIB (package data beside this module)."""
    return Path(str(importlib.resources.files("appliance.snmp").joinpath("data", JSON_NAME)))


def load_table(enterprise: int | None = None, path: str | Path | None = None) -> list[MibObject]:
    """Every scalar, column and notification of the compiled MIB, in OID order, with OIDs moved under
    ``enterprise`` when it is given (the JSON is compiled for the placeholder number)."""
    data = json.loads(Path(path or committed_json()).read_text(encoding="utf-8"))
    nodes = {k: v for k, v in data.items() if isinstance(v, dict) and "oid" in v}
    by_oid = {_oid(v["oid"]): v for v in nodes.values()}
    module = next(_oid(v["oid"]) for v in nodes.values() if v.get("class") == "moduleidentity")
    target = enterprise_oid(enterprise) if enterprise is not None else module
    out = []
    for node in nodes.values():
        kind = node.get("nodetype") if node.get("class") == "objecttype" else \
            "notification" if node.get("class") == "notificationtype" else None
        if kind not in ("scalar", "column", "notification"):
            continue
        oid = _oid(node["oid"])
        if oid[:len(module)] != module:
            raise MibError(f"{node['name']} {node['oid']} is outside the module's {module}")
        obj = MibObject(name=node["name"], oid=target + oid[len(module):], kind=kind,
                        syntax=None if kind == "notification" else _syntax(node["syntax"], data),
                        access=node.get("maxaccess", ""), units=node.get("units", ""),
                        description=node.get("description", ""),
                        objects=tuple(o["object"] for o in node.get("objects", ())))
        if kind == "column":
            row, table = by_oid[oid[:-1]], by_oid[oid[:-2]]
            indices = row.get("indices", [])
            obj = dataclasses.replace(obj, table=table["name"], indices=tuple(i["object"] for i in indices),
                                      implied=bool(indices and indices[-1].get("implied")))
        out.append(obj)
    return sorted(out, key=lambda o: o.oid)


def _oid(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _syntax(spec: dict[str, Any], data: dict[str, Any]) -> MibSyntax:
    """Resolve a type through its textual convention (local in ``data``, or one of SNMPv2-TC's)."""
    name, own = spec["type"], _constraints(spec.get("constraints", {}))
    if name in BASE_TYPES:
        return MibSyntax(BASE_TYPES[name], None, own["enums"], own["ranges"], own["sizes"], None)
    tc = data.get(name)
    if isinstance(tc, dict) and tc.get("class") == "textualconvention":
        inner = _syntax(tc["type"], data)
        hint = tc.get("displayhint") or inner.display_hint
    elif name in STANDARD_TCS:
        std = STANDARD_TCS[name]
        inner = MibSyntax(BASE_TYPES[std["type"]], None, std.get("enums", ()), (), std.get("size", ()), None)
        hint = std.get("hint")
    else:
        raise MibError(f"type {name} is neither an SMI base type, a textual convention of the MIB, nor one of "
                       f"SNMPv2-TC's known to mibgen ({', '.join(STANDARD_TCS)})")
    return MibSyntax(inner.base, name, own["enums"] or inner.enums, own["ranges"] or inner.ranges,
                     own["sizes"] or inner.sizes, hint)


def _constraints(c: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {"enums": tuple(sorted(c.get("enumeration", {}).items(), key=lambda kv: kv[1])),
            "ranges": tuple((r["min"], r["max"]) for r in c.get("range", ())),
            "sizes": tuple((s["min"], s["max"]) for s in c.get("size", ()))}


def check(mib_dirs: Sequence[str | Path] | None = None) -> list[str]:
    """The symbols whose compiled form differs from the committed JSON (empty: up to date)."""
    committed = committed_json()
    with tempfile.TemporaryDirectory(prefix="mibgen-check-") as tmp:
        fresh = compile_mib(tmp, mib_dirs=mib_dirs)
        if committed.is_file() and fresh.read_bytes() == committed.read_bytes():
            return []
        new = json.loads(fresh.read_text(encoding="utf-8"))
    old = json.loads(committed.read_text(encoding="utf-8")) if committed.is_file() else {}
    return sorted(k for k in set(new) | set(old) if new.get(k) != old.get(k)) or ["(formatting)"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m appliance.snmp.mibgen", description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 if the committed JSON is not the compiled MIB")
    mode.add_argument("--write", action="store_true", help="recompile the MIB into the committed JSON")
    mode.add_argument("--render", type=int, metavar="PEN", help="print the MIB under enterprises PEN")
    parser.add_argument("--mib-dir", action="append", default=None,
                        help=f"a directory with the standard MIBs (default: ${MIB_DIRS_ENV} and the usual places)")
    args = parser.parse_args(argv)
    try:
        if args.render is not None:
            sys.stdout.write(render_mib(args.render))
            return 0
        dirs = standard_mib_dirs(args.mib_dir) if args.mib_dir else None
        if args.write:
            print(f"wrote {compile_mib(committed_json().parent, mib_dirs=dirs)}")
            return 0
        stale = check(dirs)
    except (MibError, ValueError, OSError) as exc:
        print(f"mibgen: {exc}", file=sys.stderr)
        return 2
    if stale:
        print(f"mibgen: {committed_json()} is not the compiled {MIB_SOURCE.name} (differs in: "
              f"{', '.join(stale[:20])}{' ...' if len(stale) > 20 else ''}); run python -m appliance.snmp.mibgen "
              f"--write", file=sys.stderr)
        return 1
    print(f"{committed_json()} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
