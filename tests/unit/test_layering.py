"""The layering rule of the architecture: core modules do no I/O (sockets, files), start no threads and never read a
clock; imports point inwards only and never in a circle; nothing outside the router reads its engines; the tests and
the benchmarks share ``harness`` and import not each other.

Core modules take every instant as an argument, which is what lets a simulated day run in seconds, and what a file
holds rather than its path.  The modules that may touch the outside world are listed here, each with the reason (and
the few functions of core modules that may read a file, in ``FILE_READING_FUNCTIONS``); adding one is a design
decision, made in this file.

Layers, inside out: the core (everything not named below: engines, protocols, the router, the read model); the
simulated world (``sim``, pure, the hardware's stand-in); the edges (``EDGES``: I/O adapters); the runtime
(``runtime``, the composition root); the top (``TOP``: the command line and the harnesses that build the whole
appliance).  A module imports its own layer or one further in: the core never imports an edge, the simulated world
or the runtime; an edge never imports the runtime.
"""

from __future__ import annotations

import ast
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import appliance

PACKAGE = Path(appliance.__file__).parent
EDGES = {
    "cli": "command line",
    "__main__": "python -m appliance",
    "runtime.main": "appliance run: the event loop, signals, the control socket, the host clock",
    "runtime.platforms": "the hardware platform reads the host clock (a software clock over CLOCK_REALTIME)",
    "runtime.surfaces": "the console's and SNMP agent's event loop hand-over (asyncio)",
    "edge.control": "the Unix control socket",
    "edge.ntp_poller": "polls NTP servers with ntplib (UDP) from a thread; host clock reads",
    "edge.sync_monitor": "polls the sync monitor's NTP hosts (UDP) and runs linuxptp's nsm for its PTP slaves, from a "
                         "thread; host clock reads",
    "edge.proc": "prctl(PR_SET_PDEATHSIG) and SCHED_IDLE for the appliance's child processes",
    "edge.child": "the console's and SNMP agent's processes: starts them, feeds them the status, runs their calls",
    "edge.channel": "the socket pair between the appliance and its console and SNMP agent processes",
    "edge.pacer": "the console's and SNMP agent's global request budget: monotonic clock, sleeps its caller",
    "edge.loop": "AsyncioScheduler: timers on the event loop, the host clock",
    "edge.serial_reader": "pyserial reader thread",
    "edge.pps_linux": "Linux PPS API ioctl reader thread",
    "edge.cpu_latency": "holds the kernel's PM QoS request open (/dev/cpu_dma_latency) while the appliance runs",
    "edge.kernel_preemption": "reads the kernel's preemption mode from /sys, /proc and /boot",
    "sim.pty": "writes the simulated receiver into a pseudo-terminal in real time",
    "edge.kernel_clock": "clock_adjtime (ctypes) and the PTP_CLOCK_GETCAPS ioctl on CLOCK_REALTIME or a PHC",
    "edge.persist": "writes and fsyncs the learned clock state file",
    "edge.kernel_backend": "applies the clock service's actions to a kernel clock",
    "edge.ntp.worker": "the NTP worker process: UDP socket, kernel timestamps, error queue",
    "edge.ntp.service": "starts and watches the NTP worker processes",
    "edge.procstats": "reads /proc/<pid>/stat and status, walks the state directory, statvfs, the monotonic clock",
    "edge.ntp.shm": "the shared memory between the appliance and its NTP workers",
    "edge.ntp.fast": "drives the native fast path from a worker",
    "edge.ntp.ntske": "the NTS-KE server process: TLS over TCP, rate and connection limits, key files, the host clock",
    "edge.ptp.transport": "PTP sockets (UDP and raw Ethernet), kernel timestamps, error queue, ethtool ioctl",
    "edge.ptp.native_sync": "drives the native unicast Sync sender thread on the port's sockets",
    "edge.ptp.runner": "runs a PTP port engine on the event loop: transport, readers, timers, host clock reads",
    "edge.ptp.gm_service": "runs the PTP port on the event loop: readers, timers, host clock reads",
    "edge.ptp.slave_service": "runs the PTP slave port (an upstream grandmaster) on the event loop: sockets, timers",
    "edge.serialout": "writes the serial time string with pyserial on event-loop timers (host clock reads)",
    "edge.perout": "PTP_PEROUT_REQUEST and PTP_PIN_SETFUNC ioctls on a PHC for 1PPS",
    "edge.gpio": "drives a GPIO line (gpiod) from a thread that sleeps until each edge's host instant",
    "edge.irig.files": "reads and writes IRIG-B edge files and WAV files",
    "edge.input_files": "reads the files the core parses: leap seconds, NTP keys, PTP security associations, captures",
    "edge.irig.cli": "appliance irig render/decode: time zones, files, this year as the default year",
    "edge.irig.wavout": "writes the live IRIG-B AM output to WAV segment files or a FIFO, from a writer thread",
    "edge.irig.input": "IRIG-B input: a thread reading a WAV stream or GPIO edge events; host clock anchors",
    "audit.store": "the hash-chained audit records in SQLite (one connection and a lock, for the web threads)",
    "audit.headfile": "the audit store's head file beside it (atomic replace, fsync)",
    "audit.shared_verify": "one audit check at a time for the web threads (a lock)",
    "audit.bundle": "writes and reads signed audit bundles and the signing key",
    "backup.files": "reads the state directory for a backup archive, and stages and moves a restore's files",
    "backup.cli": "appliance backup/restore: archive files, passphrases, the host clock, the control socket",
    "audit.forwarder": "forwards audit records to a syslog collector over UDP, TCP or TLS (sockets, a sender thread)",
    "audit.cli": "appliance audit verify/export/show: files, the host clock for 'now'",
    "audit.tqlog": "the time-quality record in SQLite (a lock, for the web threads)",
    "audit.tqcli": "appliance quality export/show: CSV files, the host clock for 'now'",
    "audit.service": "writes the audit trail and time-quality record of a running appliance on loop timers",
    "web.app": "the Flask application: sessions, tokens, CSRF, rate limits (host clock for session age)",
    "web.access": "what the console's routes share of Flask's request: the user's role, the context, the audit record",
    "web.views": "the console's pages (Flask)",
    "web.backup_views": "the console's backup page: archive downloads, uploads kept in the state directory (Flask)",
    "web.api": "the REST API (Flask)",
    "web.metrics": "Prometheus /metrics (Flask)",
    "web.system": "the system page and its API (Flask): processes' CPU and memory, the state directory's disk use",
    "web.process": "the console's own process: its main, its readers of the state files, its calls",
    "web.server": "cheroot with TLS in threads of the console process",
    "web.users": "console users and API tokens in SQLite",
    "web.radius": "the RADIUS client of console logins (UDP)",
    "web.ldapauth": "the LDAP client of console logins (TCP, TLS)",
    "web.external": "asks the RADIUS or LDAP servers of a console login in order, maps the answer to a role",
    "web.logins": "who checks a console login: local users or the external servers, and its audit record",
    "web.usercli": "appliance user: reads passwords, writes the initial admin password file",
    "web.tls": "makes and writes the self-signed certificate",
    "web.settings_edit": "writes the settings changed from the console",
    "snmp.agent": "the pysnmp agent: UDP sockets, USM and VACM, notifications",
    "snmp.service": "the agent of a running appliance: loop timers, the host clock for sysUpTime, the engine ID file",
    "snmp.process": "the SNMP agent's own process: its main, the agent's thread and event loop, the engine boots file",
    "snmp.users": "the SNMPv3 users file (mode 0600) and appliance snmp: passphrases from the terminal",
    "snmp.mibgen": "reads the MIB, compiles it with pysmi and reads the compiled JSON",
}
FORBIDDEN_IMPORTS = {"socket", "serial", "scapy", "flask", "pysnmp", "threading", "asyncio", "subprocess",
                     "select", "selectors", "fcntl", "multiprocessing", "signal", "termios", "tty", "pty"}
CLOCK_READS = {("time", "time"), ("time", "time_ns"), ("time", "monotonic"), ("time", "monotonic_ns"),
               ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "sleep"), ("datetime", "now"),
               ("datetime", "utcnow"), ("datetime", "today"), ("date", "today"), ("time", "clock_gettime"),
               ("time", "clock_gettime_ns"), ("time", "localtime"), ("time", "gmtime")}


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out.append((".".join(parts) or "__init__", path))
    return out


def _violations(path: Path, module: str = "") -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    allowed_file_access = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                           and f"{module}.{f.name}" in FILE_READING_FUNCTIONS for n in ast.walk(f)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"imports {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN_IMPORTS]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in FORBIDDEN_IMPORTS:
                found.append(f"imports from {node.module}")
            if node.module in ("time", "datetime"):
                found += [f"imports {node.module}.{a.name}" for a in node.names if (node.module, a.name) in CLOCK_READS
                          or (node.module == "datetime" and a.name in ("datetime", "date"))]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in CLOCK_READS:
                found.append(f"reads the clock: {node.value.id}.{node.attr}")
        if id(node) in allowed_file_access:
            continue
        if isinstance(node, ast.Call) and (what := _file_access(node)):
            found.append(f"{what}: {ast.unparse(node.func)}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and (what := _file_import(node)):
            found.append(what)
    return found


# Calls that read or write files or directories: a core module is handed what a file holds (bytes, text, a parsed
# table), never a path to open (``edge/input_files.py`` reads the files the core parses).  ``tomllib.loads`` of a
# string is fine; ``tomllib.load`` of a file is not.  The package's own data read through importlib.resources
# (``files("appliance")...read_text()``: the packaged leap-second list, the PTP profiles) is no I/O: it is as fixed
# as the code beside it, and no simulation depends on the outside world through it.
FILE_CALLS = {("io", "open"), ("os", "open"), ("os", "read"), ("os", "write"), ("os", "listdir"), ("os", "scandir"),
              ("os", "walk"), ("os", "fdopen"), ("os", "replace"), ("os", "rename"), ("os", "remove"),
              ("os", "unlink"), ("os", "makedirs"), ("os", "mkdir"), ("glob", "glob"), ("glob", "iglob"),
              ("shutil", "copy"), ("shutil", "copy2"), ("shutil", "copyfile"), ("shutil", "copytree"),
              ("shutil", "move"), ("shutil", "rmtree"), ("sqlite3", "connect"), ("tomllib", "load"),
              ("json", "load"), ("json", "dump"), ("pickle", "load"), ("pickle", "dump")}
PATH_METHODS = {"read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob", "rglob", "mkdir", "unlink",
                "touch", "rmdir"}
PATH_NAMES = {"path", "file", "directory", "dir", "folder"}  # a receiver named so, e.g. ``path.open()``
FILE_MODULES = {"glob", "shutil", "sqlite3"}
OS_FILE_NAMES = {name for module, name in FILE_CALLS if module == "os"}


# Functions of core modules that may read files, each with the reason (the rest of their module is held to the rule).
FILE_READING_FUNCTIONS = {
    "config.load": "the settings' way in: the configuration file (the command line's --config), then the console's "
                   "saved settings; called by the command line and the simulated trials, never by an engine",
    "config.with_console_settings": "reads <state_dir>/console-settings.toml, the settings saved from the console",
}


def _file_access(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name) and func.id == "open":
        return "opens a file"
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value
    if _is_packaged_data(owner):
        return None
    if isinstance(owner, ast.Name) and (owner.id, func.attr) in FILE_CALLS:
        return "touches the file system"
    if func.attr in PATH_METHODS:
        return "touches the file system"
    if func.attr == "open" and (_is_path(owner) or (isinstance(owner, ast.Name) and owner.id.lower().rstrip("s")
                                                    .rsplit("_", 1)[-1] in PATH_NAMES)):
        return "opens a file"
    return None


def _is_path(node: ast.expr) -> bool:
    """``Path(...)``, ``pathlib.Path(...)`` or ``files(...)`` (importlib.resources), possibly joined with ``/``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _is_path(node.left)
    if isinstance(node, ast.Call):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        return name in ("Path", "PurePath", "files")
    return False


def _is_packaged_data(node: ast.expr) -> bool:
    """``files("appliance")``, joined with ``/`` or ``.joinpath(...)``: the package's own data."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _is_packaged_data(node.left)
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr == "joinpath":
        return _is_packaged_data(f.value)
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    return name == "files" and len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and \
        str(node.args[0].value).split(".")[0] == "appliance"


def _file_import(node: ast.Import | ast.ImportFrom) -> str | None:
    if isinstance(node, ast.Import):
        bad = [a.name for a in node.names if a.name.split(".")[0] in FILE_MODULES]
        return f"imports {', '.join(bad)}" if bad else None
    if node.level or not node.module:
        return None
    top = node.module.split(".")[0]
    if top in FILE_MODULES:
        return f"imports from {node.module}"
    if node.module == "os":
        bad = [a.name for a in node.names if a.name in OS_FILE_NAMES]
        return f"imports os.{', os.'.join(bad)}" if bad else None
    return None


def test_core_modules_do_no_io_and_read_no_clock() -> None:
    problems = {name: v for name, path in _modules() if name not in EDGES and (v := _violations(path, name))}
    assert not problems, f"core modules breaking the layering rule: {problems}"


def test_every_listed_file_reading_function_exists() -> None:
    names = set()
    for module, path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        names |= {f"{module}.{f.name}" for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
    assert set(FILE_READING_FUNCTIONS) <= names, f"stale entries: {set(FILE_READING_FUNCTIONS) - names}"


def test_every_listed_edge_exists() -> None:
    names = {name for name, _ in _modules()}
    assert set(EDGES) <= names, f"stale entries: {set(EDGES) - names}"


TOP = {"cli", "__main__", "sim.attacks", "sim.honesty", "sim.scenarios"}  # may import anything: they build the whole appliance
ORDER = {"core": 0, "sim": 1, "edge": 2, "runtime": 3, "top": 4}
SIM_EDGES = {"sim.pty"}  # in the simulated world's package, but an edge (it writes a pseudo-terminal)


def layer(name: str) -> str:
    if name in TOP:
        return "top"
    if name == "runtime" or name.startswith("runtime."):
        return "runtime"
    if name in EDGES or name in SIM_EDGES:
        return "edge"
    if name == "sim" or name.startswith("sim."):
        return "sim"
    return "core"


def _imported(path: Path, modules: set[str]) -> set[str]:
    """The package's modules a file imports (anywhere in it, deferred imports too), by their dotted names."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for full in names:
            if full == "appliance" or not full.startswith("appliance."):
                continue
            name = full.removeprefix("appliance.")
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def _backwards(name: str, path: Path, modules: set[str]) -> list[str]:
    mine = ORDER[layer(name)]
    allowed_sim = layer(name) != "edge" or name in SIM_EDGES  # an edge may not reach into the simulated world
    return sorted(f"{layer(name)} imports {layer(o)} {o}" for o in _imported(path, modules)
                  if ORDER[layer(o)] > mine or (layer(o) == "sim" and not allowed_sim and layer(name) == "edge"))


def test_imports_point_inwards() -> None:
    mods = _modules()
    names = {name for name, _ in mods}
    problems = {name: v for name, path in mods if (v := _backwards(name, path, names))}
    assert not problems, f"imports against the layering (core <- sim <- edge <- runtime <- top): {problems}"


def test_the_router_and_the_read_model_are_core() -> None:
    assert layer("router") == layer("readmodel") == layer("refs.model") == "core"
    assert "router" not in EDGES and "readmodel" not in EDGES


# The router's engines: only the router reads them; everyone else reads ``Router.snapshot`` or a named router method.
ROUTER_PARTS = {"clock", "selector", "utc", "references", "gnss", "alarms"}
BENCH = PACKAGE.parent / "bench"


def _reads_router_parts(path: Path) -> list[str]:
    """``router.clock``, ``runtime.router.gnss`` ...: a router's engine read from outside it."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ROUTER_PARTS:
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "router") or \
                    (isinstance(owner, ast.Attribute) and owner.attr == "router"):
                found.append(ast.unparse(node))
    return found


def test_nothing_outside_the_router_reads_its_engines() -> None:
    files = [(name, path) for name, path in _modules() if name != "router"]
    files += [(f"bench.{path.stem}", path) for path in sorted(BENCH.glob("*.py"))]
    problems = {name: v for name, path in files if (v := _reads_router_parts(path))}
    assert not problems, f"the router's engines read from outside it (use Router.snapshot): {problems}"


def test_the_listed_router_parts_are_what_the_router_holds() -> None:
    tree = ast.parse((PACKAGE / "router.py").read_text())
    router = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Router")
    init = next(n for n in router.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assigned = {t.attr for t in ast.walk(init) if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store)}
    assert ROUTER_PARTS <= assigned, f"stale entries: {ROUTER_PARTS - assigned}"


def test_the_router_parts_checker_catches_a_reach_through(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f(runtime, router):\n"
                   "    return runtime.router.gnss.guard, router.utc.table, router.now_tai_ns\n")
    assert _reads_router_parts(bad) == ["runtime.router.gnss", "router.utc"]


def test_the_direction_checker_catches_a_backwards_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from appliance.runtime.runtime import Runtime\nfrom appliance.edge import persist\n"
                   "def f():\n    from appliance.sim.world import SimWorld\n")
    names = {"runtime.runtime", "edge.persist", "sim.world", "router"}
    assert _backwards("router", bad, names) == ["core imports edge edge.persist", "core imports runtime runtime.runtime",
                                                "core imports sim sim.world"]
    assert _backwards("edge.persist", bad, names) == ["edge imports runtime runtime.runtime",
                                                      "edge imports sim sim.world"]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import one another, directly or through others (the strongly connected components
    of more than one module, Tarjan's algorithm), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_modules_import_one_another() -> None:
    """A module that imports one which imports it back, directly or through others, deferred imports included (a
    circle is a part that cannot be understood, tested or moved alone)."""
    mods = _modules()
    names = {name for name, _ in mods}
    graph = {name: _imported(path, names) - {name} for name, path in mods}
    cycles = _cycles(graph)
    detail = [{m: sorted(graph[m] & set(c)) for m in c} for c in cycles]
    assert not cycles, f"modules importing one another: {detail}"


def test_the_cycle_finder_finds_a_circle_through_others() -> None:
    graph = {"web.app": {"web.api", "web.access"}, "web.api": {"web.access", "status"},
             "web.access": {"web.app"}, "status": set(), "a": {"b"}, "b": {"a"}}
    assert _cycles(graph) == [["a", "b"], ["web.access", "web.api", "web.app"]]
    assert _cycles({"x": {"y"}, "y": set()}) == []


# The top-level packages of the repository, and the ones each may import: the product imports none of the others;
# the tests and the benchmarks share ``harness`` and import not each other; ``harness`` imports neither.
ROOT = PACKAGE.parent
MAY_NOT_IMPORT = {"appliance": {"tests", "bench", "harness"}, "harness": {"tests", "bench"}, "bench": {"tests"},
                  "tests": {"bench"}}


def _top_level_imports(path: Path) -> set[str]:
    """The top-level packages a file imports, anywhere in it (deferred imports too)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_tests_and_benchmarks_share_a_harness_and_import_not_each_other() -> None:
    problems = {}
    for top, banned in MAY_NOT_IMPORT.items():
        for path in sorted((ROOT / top).rglob("*.py")):
            if bad := _top_level_imports(path) & banned:
                problems[str(path.relative_to(ROOT))] = sorted(bad)
    assert not problems, f"imports across the repository's packages: {problems}"


def test_the_wheel_ships_the_product_alone() -> None:
    """setuptools' package discovery (``[tool.setuptools.packages.find]``) takes ``appliance`` and none of the
    repository's other packages."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]

    def shipped(name: str) -> bool:
        return any(fnmatch(name, p) for p in find["include"]) and not any(fnmatch(name, p)
                                                                          for p in find.get("exclude", ()))
    assert shipped("appliance") and shipped("appliance.web")
    assert not any(shipped(name) for name in ("harness", "tests", "bench", "tests.interop"))


# Private names of other libraries the package must use, and the native paths (extension modules' names).
FOREIGN_PRIVATE = {"argparse._SubParsersAction", "parser._negative_number_matcher", "_fastpath",
                   "_syncsend"}


def _reaches_in(path: Path) -> list[str]:
    """Private attributes (``_name``) read off anything but ``self``/``cls``, and private names imported."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("appliance"):
            found += [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return [f for f in found if f not in FOREIGN_PRIVATE]


def test_no_module_touches_another_objects_private_attributes() -> None:
    problems = {name: v for name, path in _modules() if (v := _reaches_in(path))}
    assert not problems, f"private attributes reached from outside their object: {problems}"


def test_the_checker_catches_file_reads_and_writes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os, shutil\nimport sqlite3\nimport tomllib\nfrom pathlib import Path\n"
                   "from importlib.resources import files\n"
                   "def f(path, text):\n"
                   "    open(path).read()\n"
                   "    Path(path).read_text()\n"
                   "    Path(path).open()\n"
                   "    path.write_bytes(b'')\n"
                   "    os.listdir(path)\n"
                   "    sqlite3.connect(path)\n"
                   "    tomllib.load(path)\n"
                   "    tomllib.loads(text)\n"
                   "    files('appliance').joinpath('data', 'x.toml').read_text()\n"
                   "    (files('appliance') / 'data').read_bytes()\n"
                   "    files('other').joinpath('x').read_text()\n"
                   "    gate.open()\n")
    assert sorted(_violations(bad)) == ["imports shutil", "imports sqlite3", "opens a file: Path(path).open",
                                        "opens a file: open", "touches the file system: Path(path).read_text",
                                        "touches the file system: files('other').joinpath('x').read_text",
                                        "touches the file system: os.listdir",
                                        "touches the file system: path.write_bytes",
                                        "touches the file system: sqlite3.connect",
                                        "touches the file system: tomllib.load"]


def test_a_listed_function_may_read_files_and_the_rest_of_its_module_may_not(tmp_path: Path) -> None:
    bad = tmp_path / "config.py"
    bad.write_text("from pathlib import Path\n"
                   "def load(path):\n    return Path(path).read_text()\n"
                   "def other(path):\n    return Path(path).read_text()\n")
    assert _violations(bad, "config") == ["touches the file system: Path(path).read_text"]


def test_the_checker_catches_a_clock_read(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nimport threading\ndef f():\n    return time.time_ns()\n")
    assert _violations(bad) == ["imports threading", "reads the clock: time.time_ns"]
