"""The ``appliance`` command line: run, status, replay, check-config, config list, sim-receiver.

Edge module: parses arguments, loads configuration, prints.  Configuration problems exit with status 2 after listing
every problem; an unreachable appliance exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from appliance import __version__, config as cfg

EXIT_CONFIG = 2


def _settings_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML configuration file (default: the embedded default)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="set_pairs",
                   help="override one setting (repeatable), e.g. --set gnss.baud=115200")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="appliance", description="GNSS-disciplined grandmaster time server")
    parser.add_argument("--version", action="version", version=f"appliance {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("run", help="run the appliance (simulated receiver unless gnss.device is set)")
    _settings_args(p)
    p = sub.add_parser("status", help="one-screen summary from the running appliance")
    _settings_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("replay", help="decode a receiver capture and print each epoch")
    p.add_argument("file", help="capture file (NMEA and/or u-blox UBX bytes; leading # comment lines allowed)")
    p.add_argument("--json", action="store_true", help="one JSON object per epoch")
    p = sub.add_parser("check-config", help="validate a configuration file and list every problem")
    p.add_argument("file")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="set_pairs")
    p = sub.add_parser("config", help="inspect settings")
    csub = p.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    pl = csub.add_parser("list", help="every setting: name, default, current value, help")
    _settings_args(pl)
    pl.add_argument("--json", action="store_true")
    p = sub.add_parser("holdover", help="force the clock into holdover (maintenance, tests) or let it return")
    _settings_args(p)
    p.add_argument("action", choices=("start", "stop"))
    p.add_argument("--reason", default="", help="why: goes into the audit record")
    from appliance.sim.drills import WORLD_ACTIONS

    p = sub.add_parser("world", help="drills on the running appliance's simulated world: the sky, the receiver, "
                       "spoofing and jamming", formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="actions:\n" + "\n".join(f"  {k:<15} {v}" for k, v in WORLD_ACTIONS.items()))
    p.add_argument("action", choices=tuple(WORLD_ACTIONS), metavar="ACTION")
    p.add_argument("value", nargs="?", default="", help="the attack's size, where it takes one")
    _settings_args(p)
    p = sub.add_parser("integrity", help="override the GNSS integrity verdict (trust, reject, auto) or survey the "
                       "antenna position again (resurvey); audited")
    p.add_argument("action", choices=("trust", "reject", "auto", "resurvey"))
    p.add_argument("--reason", default="", help="why: goes into the audit record")
    _settings_args(p)
    p = sub.add_parser("reference", help="pin the clock to one reference (or unpin: automatic selection), or enable "
                       "or disable one; audited")
    p.add_argument("action", choices=("pin", "unpin", "enable", "disable"))
    p.add_argument("name", nargs="?", default="", help="the reference: gnss, ptp, ntp, irig, pps")
    p.add_argument("--reason", default="", help="why: goes into the audit record")
    _settings_args(p)
    p = sub.add_parser("alarm", help="the active alarms, their history, and acknowledging one")
    asub = p.add_subparsers(dest="alarm_command", required=True, metavar="SUBCOMMAND")
    pa = asub.add_parser("list", help="the active alarms: ID, severity, since, acknowledgement, what to do")
    pa.add_argument("--json", action="store_true")
    _settings_args(pa)
    pa = asub.add_parser("history", help="each alarm from its raise to its clear, newest first (from the audit trail)")
    pa.add_argument("--severity", choices=("critical", "major", "minor", "warning"))
    pa.add_argument("--code", help="one alarm's code")
    pa.add_argument("--state", choices=("open", "cleared"))
    pa.add_argument("--search", help="words in the code, title or text")
    pa.add_argument("--last", type=int, default=50, help="at most this many (default 50)")
    _settings_args(pa)
    pa = asub.add_parser("ack", help="acknowledge an active alarm (audited); it stays active until it clears")
    pa.add_argument("code", help="the alarm's code, e.g. gnss-no-fix")
    pa.add_argument("--comment", default="", help="goes into the audit record")
    _settings_args(pa)
    asub.add_parser("catalogue", help="every alarm the appliance can raise: ID, code, severity, cause, what to do")
    p = sub.add_parser("sim", help="run a numbered, seeded clock scenario in simulated time and print its figures")
    p.add_argument("--scenario", required=True, metavar="NAME",
                   help="one of: " + ", ".join(_scenario_names()) + " (or all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("sim-receiver", help="write the simulated receiver into a pseudo-terminal in real time")
    _settings_args(p)
    p.add_argument("--link", required=True, help="path of the symlink to the pty slave, e.g. /tmp/gnss0")
    p.add_argument("--seconds", type=int, default=None, help="stop after this many seconds")
    p.add_argument("--family", choices=("ublox9", "ublox8", "unicore", "nmea"), default="ublox9",
                   help="which receiver it is, for the commands it answers: u-blox generation 9 (ZED-F9T), u-blox M8T, "
                        "Unicore UM980, or an NMEA receiver that answers nothing (default ublox9)")
    p = sub.add_parser("irig", help="render what the IRIG-B output would send, or decode an IRIG-B signal file")
    isub = p.add_subparsers(dest="irig_command", required=True, metavar="SUBCOMMAND")
    pr = isub.add_parser("render", help="write IRIG-B frames as DC level shift edges or an AM WAV file")
    _settings_args(pr)
    pr.add_argument("--format", required=True, help="B000-B007 (DC level shift) or B120-B127 (AM on 1 kHz)")
    pr.add_argument("--start", required=True, metavar="ISO-TIME", help="UTC start on a whole second, e.g. "
                    "2016-12-31T23:59:55Z (23:59:60 is accepted where a leap second was inserted)")
    pr.add_argument("--seconds", type=int, required=True, help="number of frames (seconds), 1-86400")
    out = pr.add_mutually_exclusive_group(required=True)
    out.add_argument("--wav", metavar="FILE", help="AM samples as a 16-bit mono WAV (B12x)")
    out.add_argument("--edges", metavar="FILE", help="edge file (B00x): '<ns from start> <level>' per line")
    pr.add_argument("--rate", type=int, default=48_000, help="WAV sample rate, samples/s (default 48000)")
    pr.add_argument("--bound-ns", type=int, default=100, help="clock error bound that sets the time quality "
                    "(default 100 ns; -1: not synchronized, quality 15)")
    pr.add_argument("--timezone", default="UTC", help="IANA time zone of the coded time (default UTC)")
    pd = isub.add_parser("decode", help="decode an edge file or a WAV file and print each frame")
    _settings_args(pd)
    pd.add_argument("file")
    pd.add_argument("--format", default=None, help="B00x/B12x; default: from the file's header, else detected")
    pd.add_argument("--year", type=int, default=None, help="year for codes without one (default: the file's "
                    "start, else this year)")
    pd.add_argument("--json", action="store_true", help="one JSON object per frame")
    from appliance.audit import cli as audit_cli
    from appliance.audit import tqcli
    from appliance.web import usercli

    for sp in audit_cli.add_parser(sub):
        _settings_args(sp)
    tqcli.add_parser(sub)
    usercli.add_parser(sub, _settings_args)
    from appliance.snmp import users as snmp_users

    snmp_users.add_parser(sub, _settings_args)
    from appliance.backup import cli as backup_cli

    backup_cli.add_parser(sub, _settings_args)
    return parser


def _scenario_names() -> list[str]:
    from appliance.sim.scenarios import SCENARIOS

    return list(SCENARIOS)


def load_config(args: argparse.Namespace) -> cfg.Config:
    try:
        return cfg.load(getattr(args, "config", None), getattr(args, "set_pairs", []))
    except cfg.ConfigError as exc:
        for problem in exc.problems:
            print(f"appliance: config: {problem}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {"run": cmd_run, "status": cmd_status, "replay": cmd_replay, "check-config": cmd_check_config,
               "config": cmd_config, "sim-receiver": cmd_sim_receiver, "holdover": cmd_holdover,
               "sim": cmd_sim, "irig": cmd_irig, "audit": cmd_audit, "quality": cmd_quality,
               "user": cmd_user, "snmp": cmd_snmp, "world": cmd_world,
               "integrity": cmd_integrity, "reference": cmd_reference, "alarm": cmd_alarm,
               "backup": cmd_backup, "restore": cmd_restore}[args.command]
    try:
        return handler(args)
    except BrokenPipeError:
        return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from appliance.edge.input_files import load_leap_table
    from appliance.audit import cli as audit_cli

    config = load_config(args)
    return audit_cli.run(args, config.state_path(), load_leap_table(config))


def cmd_quality(args: argparse.Namespace) -> int:
    from appliance.edge.input_files import load_leap_table
    from appliance.audit import tqcli

    config = load_config(args)
    return tqcli.run(args, config.state_path(), load_leap_table(config))


def cmd_user(args: argparse.Namespace) -> int:
    from appliance.web import usercli

    return usercli.run(args, load_config(args).state_path())


def cmd_snmp(args: argparse.Namespace) -> int:
    from appliance.snmp import users as snmp_users

    return snmp_users.run(args, load_config(args))


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def cmd_run(args: argparse.Namespace) -> int:
    from appliance.runtime.main import run

    config = load_config(args)
    _setup_logging(config.log.level)
    if _resume_restore(config):  # a restore cut short: finished, and the settings it wrote read again
        config = load_config(args)
    for note in (*config.old_names, *config.notes):
        logging.getLogger("appliance").warning("%s", note)
    return run(config)


def _resume_restore(config: cfg.Config) -> bool:
    """A restore staged from the console, or one cut short, made before anything starts; True if there was one."""
    from appliance.backup.archive import BackupError
    from appliance.backup.cli import audit_note
    from appliance.backup.files import JOURNAL, pending, resume

    state = config.state_path()
    if not (state / JOURNAL).exists():
        return False
    staged = pending(state)
    try:
        resume(state)
    except (BackupError, OSError) as exc:
        logging.getLogger("appliance").error("the configuration restore waiting in %s could not be made: %s", state,
                                             exc)
        return False
    what = "the configuration restore staged from the console" if staged else "an interrupted configuration restore"
    logging.getLogger("appliance").warning("%s was made from its staged files before starting", what)
    audit_note(config, "restore.applied", f"{what} was made at start", {"staged": staged})
    return True


def cmd_status(args: argparse.Namespace) -> int:
    from appliance import status
    from appliance.edge import control

    config = load_config(args)
    try:
        reply = control.request(config.control_socket_path(), {"cmd": "status"})
    except control.ControlError as exc:
        print(f"appliance: status: {exc}", file=sys.stderr)
        if isinstance(exc, control.NotRunning):
            print(f"appliance: {where_looked(config)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(reply["status"], indent=2))
    else:
        print(status.render(reply["status"]))
    return 0


def _control(args: argparse.Namespace, request: dict, what: str) -> dict | None:
    """One request to the running appliance over its control socket, as the user running the command; None (and a
    line on stderr) if it cannot be made or is refused."""
    import getpass

    from appliance.edge import control

    config = load_config(args)
    try:
        reply = control.request(config.control_socket_path(), {**request, "user": getpass.getuser()})
    except control.ControlError as exc:
        print(f"appliance: {what}: {exc}", file=sys.stderr)
        if isinstance(exc, control.NotRunning):
            print(f"appliance: {where_looked(config)}", file=sys.stderr)
        return None
    if not reply.get("ok"):
        print(f"appliance: {what}: {reply.get('error', 'refused')}", file=sys.stderr)
        return None
    return reply


def where_looked(config: cfg.Config) -> str:
    """Where a command that found no appliance running looked, and how to point it at the one meant: a command finds
    the appliance by the control socket in its state directory, so it needs the configuration that ``run`` got."""
    def source(name: str) -> str:
        origin = config.origins.get(name, "default")
        return {"default": "the default", "--set": "--set", "console": "the console's settings"}.get(
            origin, f"the file {origin}")

    if config.control.socket:
        looked = f"looked for the control socket {config.control_socket_path()} (control.socket from " \
                 f"{source('control.socket')})"
    else:
        looked = f"looked in the state directory {config.state_path()} (state_dir from {source('state_dir')})"
    return (f"{looked}; if the appliance runs with another configuration, give this command the same --config FILE "
            "and --set state_dir=... (or control.socket=...) as `appliance run`")


def cmd_backup(args: argparse.Namespace) -> int:
    from appliance.backup import cli as backup_cli

    return backup_cli.cmd_backup(args, load_config(args))


def cmd_restore(args: argparse.Namespace) -> int:
    from appliance.backup import cli as backup_cli

    def load(path: str | None) -> cfg.Config:  # the configuration file named, or the archive's own
        return load_config(argparse.Namespace(config=path, set_pairs=args.set_pairs))

    return backup_cli.cmd_restore(args, load)


def cmd_holdover(args: argparse.Namespace) -> int:
    reply = _control(args, {"cmd": "holdover", "action": args.action, "reason": args.reason},
                     f"holdover {args.action}")
    if reply is None:
        return 1
    print(f"holdover {args.action}: clock is {reply['state']}")
    return 0


def cmd_world(args: argparse.Namespace) -> int:
    reply = _control(args, {"cmd": "world", "action": args.action, "value": args.value}, f"world {args.action}")
    if reply is None:
        return 1
    print(f"simulated world: {reply.get('done', args.action)}")
    return 0


def cmd_integrity(args: argparse.Namespace) -> int:
    reply = _control(args, {"cmd": "integrity", "action": args.action, "reason": args.reason},
                     f"integrity {args.action}")
    if reply is None:
        return 1
    print(f"integrity {args.action}: override {reply['override']}, verdict {reply['level']}, reference "
          f"{'used' if reply['usable'] else 'rejected'}")
    return 0


def cmd_reference(args: argparse.Namespace) -> int:
    if args.action != "unpin" and not args.name:
        print(f"appliance: reference {args.action}: name the reference (gnss, ptp, ntp, irig, pps)", file=sys.stderr)
        return 2
    reply = _control(args, {"cmd": "reference", "action": args.action, "name": args.name, "reason": args.reason},
                     f"reference {args.action}")
    if reply is None:
        return 1
    print(f"{reply['done']}; active reference: {reply['active'] or 'none'}")
    return 0


def cmd_alarm(args: argparse.Namespace) -> int:
    from appliance import alarms, status

    if args.alarm_command == "catalogue":
        for spec in alarms.CATALOG.values():
            print(f"{spec.id:>3}  {spec.severity.value:<8} {spec.code:<24} {spec.title}\n"
                  f"     cause ({spec.probable_cause}): {spec.cause}\n     do: {spec.action}")
        return 0
    if args.alarm_command == "history":
        return _alarm_history(args)
    if args.alarm_command == "ack":
        reply = _control(args, {"cmd": "alarm", "action": "ack", "code": args.code, "reason": args.comment},
                         f"alarm ack {args.code}")
        if reply is None:
            return 1
        print(f"alarm {args.code} acknowledged by {reply['acked_by']}")
        return 0
    reply = _control(args, {"cmd": "status"}, "alarm list")
    if reply is None:
        return 1
    s = reply["status"]
    active = [a for a in s["alarms"] if a["raised"]]
    if args.json:
        print(json.dumps(active, indent=1))
        return 0
    print(status.verdict_line(s["verdict"], s["at_tai_ns"]) if s.get("verdict") else "")
    if not active:
        print("no active alarm")
    for a in active:
        ack = f"acknowledged by {a['acked_by']}" if a.get("acked_by") else "not acknowledged"
        print(f"#{a['id']:<3} {a['severity'].upper():<8} {a['code']}: {a['text']}\n"
              f"     up {status.age_text(s['at_tai_ns'], a['since_ns'])}, {ack}"
              + (f"\n     now: {a['diagnosis']}" if a.get("diagnosis") else "")
              + f"\n     cause ({a['probable_cause']}): {a['cause']}\n     do: {a['action']}")
    return 0


def _alarm_history(args: argparse.Namespace) -> int:
    from appliance import alarms, leap
    from appliance.audit.cli import open_store
    from appliance.audit.chain import AuditError
    from appliance.edge.input_files import load_leap_table

    config = load_config(args)
    table = load_leap_table(config)
    try:
        with open_store(config.state_path()) as store:
            records = store.records(kinds=list(alarms.HISTORY_KINDS), limit=4000)
    except AuditError as exc:
        print(f"appliance: alarm history: {exc}", file=sys.stderr)
        return 1
    found = alarms.select(alarms.from_audit(records), args.severity, args.code, args.state, args.search)
    for e in found[:max(1, args.last)]:
        def utc(ns: int | None) -> str:
            return "still active" if ns is None else leap.tai_to_utc(ns, table).iso_ms()
        ack = f", acknowledged by {e.acked_by}" if e.acked_by else ""
        print(f"{utc(e.raised_at_ns)} .. {utc(e.cleared_at_ns)}  #{e.id:<3} {e.severity.upper():<8} {e.code}: "
              f"{e.text}{ack}")
    if not found:
        print("no alarm in the history matches", file=sys.stderr)
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    from appliance.sim.scenarios import SCENARIOS, run_scenario

    logging.basicConfig(level=logging.ERROR)
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    if any(n not in SCENARIOS for n in names):
        print(f"appliance: sim: no scenario {args.scenario!r}; known: {', '.join(SCENARIOS)}", file=sys.stderr)
        return EXIT_CONFIG
    ok = True
    for name in names:
        result = run_scenario(name, args.seed)
        ok &= result.passed
        if args.json:
            print(json.dumps({"scenario": result.number, "name": name, "seed": args.seed, "figures": result.figures,
                              "checks": [{"check": c, "passed": p} for c, p in result.checks],
                              "passed": result.passed}))
            continue
        print(f"scenario {result.number} {name} (seed {args.seed}): {'PASS' if result.passed else 'FAIL'}")
        for key, value in result.figures.items():
            print(f"  {key:32} {round(value, 1) if isinstance(value, float) else value}")
        for check, passed in result.checks:
            print(f"  [{'pass' if passed else 'FAIL'}] {check}")
    return 0 if ok else 1


def cmd_replay(args: argparse.Namespace) -> int:
    from appliance.edge.input_files import read_capture
    from appliance.gnss import replay

    try:
        data = read_capture(args.file)
    except OSError as exc:
        print(f"appliance: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    result = replay.replay_bytes(data)
    if args.json:
        for epoch in result.epochs:
            print(json.dumps(replay.epoch_json(epoch)))
        print(json.dumps({"summary": replay.summary_json(result)}))
        return 0
    for line in replay.lines(result):
        print(line)
    print(replay.summary_line(result))
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    if not Path(args.file).is_file():
        print(f"appliance: config: {args.file}: no such file", file=sys.stderr)
        return EXIT_CONFIG
    args.config = args.file
    config = load_config(args)
    if config.ptp.interface:
        from appliance.protocol.ptp.profiles import port_config_from

        _ptp, errors, warnings = port_config_from(config.section("ptp"))
        for warning in warnings:
            print(f"{args.file}: warning: {warning}", file=sys.stderr)
        from appliance.runtime.outputs import ptp_security
        try:
            ptp_security(config.ptp)  # the sa_file, spp and key of PTP authentication
        except ValueError as exc:
            errors.append(str(exc))
        if errors:
            for error in errors:
                print(f"appliance: config: {args.file}: {error}", file=sys.stderr)
            return EXIT_CONFIG
    from appliance.web.external import problems as auth_problems

    if bad_auth := auth_problems(config.auth):
        for error in bad_auth:
            print(f"appliance: config: {args.file}: {error}", file=sys.stderr)
        return EXIT_CONFIG
    for note in (*config.old_names, *config.notes):
        print(f"{args.file}: warning: {note}", file=sys.stderr)
    changed = config.changed_from_default()
    print(f"{args.file}: OK ({len(changed)} setting(s) differ from the default)")
    for name, value in sorted(changed.items()):
        print(f"  {name} = {cfg.shown(cfg.setting_of(name) or cfg.BY_NAME[name], value)!r}")
    if len(config.receivers) > 1:
        print(f"  {len(config.receivers)} GNSS receivers: " + ", ".join(
            f"{rx.number} {rx.name} ({rx.device or 'simulated'}, priority {rx.priority})" for rx in config.receivers))
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    config = load_config(args)
    for note in config.old_names:
        print(f"appliance: config: warning: {note}", file=sys.stderr)
    rows = [{"name": s.name, "type": s.type, "default": s.default, "value": cfg.shown(s, config[s.name]),
             "origin": config.origins.get(s.name, "default"), "restart": s.restart, "allowed": s.allowed(),
             "help": s.help} for s in cfg.settings_of(config)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    print(f"{'NAME':{width}}  {'DEFAULT':24}  {'CURRENT':24}  HELP")
    for r in rows:
        mark = "" if r["origin"] == "default" else "*"
        note = "" if r["restart"] else " (applies without restart)"
        print(f"{r['name']:{width}}  {_show(r['default']):24}  {_show(r['value']) + mark:24}  {r['help']}{note}")
    return 0


def _show(value: object) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def cmd_sim_receiver(args: argparse.Namespace) -> int:
    from appliance.edge.input_files import load_leap_table
    from appliance.sim.pty import PtyReceiver

    config = load_config(args)
    _setup_logging(config.log.level)
    try:
        pty = PtyReceiver(args.link, config.sim.seed, load_leap_table(config), family=args.family)
    except OSError as exc:
        print(f"appliance: cannot create the pseudo-terminal link {args.link}: {exc}", file=sys.stderr)
        return 1
    print(f"{pty.slave_path} {args.link}", flush=True)
    try:
        pty.run(args.seconds)
    finally:
        pty.close()
    return 0


def cmd_irig(args: argparse.Namespace) -> int:
    from appliance.edge.input_files import load_leap_table
    from appliance.edge.irig import cli as irig_cli

    config = load_config(args)
    table = load_leap_table(config)
    try:
        if args.irig_command == "render":
            return irig_cli.render(args, table)
        return irig_cli.decode(args, table)
    except ValueError as exc:  # bad format, time, zone or file: one clear line
        print(f"appliance: irig: {exc}", file=sys.stderr)
        return EXIT_CONFIG
