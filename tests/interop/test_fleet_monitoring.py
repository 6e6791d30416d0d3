"""Fleet monitoring that ships with the appliance (deploy/prometheus, deploy/grafana), checked with Prometheus' own
tools against the appliance's real ``/metrics``.

One appliance is taken through the states an operator's NMS must tell apart -- locked, a holdover past its promise,
the sky blocked, a spoofed position, its audit store cut short behind its back, a restart -- and ``/metrics`` is
scraped in each.  From those scrapes a ``promtool test rules`` file is built: every scraped series, as Prometheus
would store it (with ``instance`` and ``job``), held for ten minutes per state, one state after the other, and for
each state the alerts that must fire and those that must not.  The Grafana dashboard's queries must parse
(``promtool check rules``) and name only series the appliance exports (or Prometheus' own ``up`` and ``ALERTS``);
the example Prometheus configuration must pass ``promtool check config``; and a real Prometheus started on it
(loopback, two appliances) scrapes both.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import ssl
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness.peers import require
from harness.procs import ENV, appliance, free_tcp_port, free_udp_port, stop
from harness.ptp_appliance import seed_learned_state

pytestmark = [pytest.mark.interop]
REPO = Path(__file__).parents[2]
RULES = REPO / "deploy" / "prometheus" / "appliance-rules.yml"
CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "appliance-fleet.json"
INSTANCE, JOB = "gm-a.example.net:8443", "appliance-gm-a"
PHASE_MIN = 10  # minutes each state is held in the promtool timeline
PROMETHEUS_OWN = {"up", "ALERTS"}
KEYWORDS = {"sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile",
            "count_values", "and", "or", "unless", "bool", "offset"}
SETTINGS = ["--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3", "--set", "web.metrics_public=true",
            # a holdover spec below the locked bound: a holdover is past its promise at once
            "--set", "clock.holdover_spec_ns=10",
            # the simulated antenna's surveyed position, so a pushed position is caught at once
            "--set", "integrity.position=46.2044,6.1432,375", "--set", "integrity.qualification_s=10",
            # a PTP port too (on loopback), so that its series are among those checked
            "--set", "ptp.interface=lo"]
TARGETS: dict[str, str] = {}  # the sync monitor's clients: its own NTP server (over a 1 ns limit), a closed port


def scrape(port: int) -> str:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10) as reply:
        return reply.read().decode()


def cli(state: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "appliance", *args, "--set", f"state_dir={state}"],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr


def run(state: Path, web: int) -> object:
    ntp, closed = TARGETS["over"].split(":")[1], TARGETS["unreachable"]
    return appliance("run", "--set", f"state_dir={state}", *SETTINGS, "--set", "web.listen=127.0.0.1",
                     "--set", f"web.port={web}", "--set", "ntp.listen=127.0.0.1", "--set", f"ntp.port={ntp}",
                     "--set", "ntp.workers=1", "--set", f"monitor.ntp_targets={TARGETS['over']},{closed}",
                     "--set", "monitor.interval_s=1", "--set", "monitor.timeout_s=0.2",
                     "--set", f"monitor.limits={TARGETS['over']}=1")


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """/metrics in each state, in the order they came."""
    require("promtool")
    state = tmp_path_factory.mktemp("fleet") / "state"
    state.mkdir()
    seed_learned_state(state)  # the clock may hold over at once
    web = free_tcp_port()
    TARGETS.update(over=f"127.0.0.1:{free_udp_port()}", unreachable=f"127.0.0.1:{free_udp_port()}")
    got: dict[str, str] = {}
    proc = run(state, web)
    try:
        got["locked"] = scrape_when(web, lambda m: traceable(m) and monitor(m, TARGETS["over"], "over-limit")
                                    and monitor(m, TARGETS["unreachable"], "unreachable"))
        cli(state, "holdover", "start", "--reason", "fleet monitoring test")
        got["holdover_expired"] = scrape_when(web, lambda m: alarm(m, "clock-holdover-expired"))
        cli(state, "holdover", "stop", "--reason", "fleet monitoring test")
        got["locked_again"] = scrape_when(web, lambda m: traceable(m) and not alarm(m, "clock-holdover-expired"))
        cli(state, "world", "block-sky")
        got["sky_blocked"] = scrape_when(web, lambda m: not any(
            v for k, v in m.items() if k.startswith("appliance_reference_active{")))
        cli(state, "world", "clear-sky")
        scrape_when(web, traceable, timeout_s=90)
        cli(state, "world", "spoof-position", "200")
        got["spoofed"] = scrape_when(web, lambda m: alarm(m, "gnss-spoofing"))
        cli(state, "world", "stop-attacks")
        scrape_when(web, lambda m: not alarm(m, "gnss-spoofing"), timeout_s=90)
        # records deleted behind the appliance's back: found at the next append (an operator's holdover)
        with sqlite3.connect(state / "audit.sqlite") as db:
            (last,) = db.execute("SELECT max(seq) FROM audit_record").fetchone()
            db.execute("DELETE FROM audit_record WHERE seq > ?", (last - 3,))
        cli(state, "holdover", "stop", "--reason", "fleet monitoring test: an append")
        got["audit_broken"] = scrape_when(web, lambda m: alarm(m, "audit-truncated"))
        code, err = stop(proc)
        assert code == 0, err[-3000:]
        proc = run(state, web)  # started again: its uptime starts again
        got["restarted"] = scrape_when(web, traceable)
        yield got
    finally:
        stop(proc)


def traceable(m: dict[str, float]) -> bool:
    return any(k.startswith("appliance_time_traceable{") and v == 1 for k, v in m.items())


def monitor(m: dict[str, float], target: str, state: str) -> bool:
    return any(k.startswith("appliance_monitor_state{") and f'target="{target}"' in k and f'state="{state}"' in k
               and v == 1 for k, v in m.items())


def alarm(m: dict[str, float], code: str) -> bool:
    return any(k.startswith("appliance_alarm{") and f'code="{code}"' in k and v == 1 for k, v in m.items())


def scrape_when(port: int, condition: Callable[[dict[str, float]], bool], timeout_s: float = 90) -> str:
    """/metrics once it shows the state: the console serves the status the appliance last published, so what
    status.json says may not have reached it yet."""
    end, text = time.monotonic() + timeout_s, ""
    while time.monotonic() < end:
        try:
            text = scrape(port)
        except OSError:
            text = ""
        if text and condition(series_of(text)):
            return text
        time.sleep(0.3)
    raise AssertionError(f"/metrics did not show the state within {timeout_s} s:\n{text[-3000:]}")


# --- the promtool test built from the scrapes ---------------------------------------------------------------------

def series_of(text: str) -> dict[str, float]:
    """Every sample of an exposition as a promtool series selector (with instance and job) and its value."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {**sample.labels, "instance": INSTANCE, "job": JOB}
            body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            out[f"{sample.name}{{{body}}}"] = sample.value
    return out


def number(value: float) -> str:
    return "NaN" if value != value else repr(float(value))


def timeline(scrapes: dict[str, str]) -> list[dict[str, str]]:
    """Each series held for PHASE_MIN one-minute samples per state ('_' where a state has none of it); the uptime
    counts on a minute a sample, from each state's own value (so a restart is a reset)."""
    phases = [series_of(text) for text in scrapes.values()]
    names = sorted(set().union(*phases))
    out = []
    for name in names:
        parts = []
        uptime = previous = None  # the timeline's uptime, and the last scraped one
        for phase in phases:
            if name not in phase:
                parts.append(f"_x{PHASE_MIN}")
            elif name.startswith("appliance_uptime_seconds{"):
                # counting on through the timeline's minutes; from the scraped value again after a restart
                scraped = phase[name]
                uptime = scraped if uptime is None or scraped < previous else uptime + 60
                previous = scraped
                parts.extend(number(uptime + 60 * i) for i in range(PHASE_MIN))
                uptime += 60 * (PHASE_MIN - 1)
            elif phase[name] != phase[name]:  # NaN: promtool's "aXn" notation takes numbers only
                parts.append(" ".join(["NaN"] * PHASE_MIN))
            else:
                parts.append(f"{number(phase[name])}x{PHASE_MIN - 1}")
        out.append({"series": name, "values": " ".join(parts)})
    up = f'up{{instance="{INSTANCE}",job="{JOB}"}}'
    out.append({"series": up, "values": f"1x{PHASE_MIN * len(phases) - 1}"})
    return out


def rule_annotations() -> dict[str, dict[str, str]]:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    return {r["alert"]: r for r in rules}


def alert(name: str, **labels: str) -> dict:
    rule = rule_annotations()[name]
    values = {"instance": INSTANCE, "job": JOB, **labels}

    def render(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: values[m.group(1)], text)

    return {"exp_labels": {**values, "severity": rule["labels"]["severity"]},
            "exp_annotations": {k: render(v) for k, v in rule["annotations"].items()}}


def expectations() -> dict[str, tuple[list[tuple[str, dict]], list[str]]]:
    """Per state: the alerts that must fire at its end (with their own labels), and those that must not."""
    quiet = ["ApplianceDown", "ApplianceNotTraceable", "ApplianceHoldoverBeyondPromise", "ApplianceIntegritySuspect",
             "ApplianceAuditChainBroken", "ApplianceRestarted"]
    return {
        # the sync monitor's two clients: its own NTP server over a 1 ns limit, a closed port
        "locked": ([("ApplianceClientBeyondLimit", {"target": TARGETS["over"], "kind": "ntp"}),
                    ("ApplianceClientUnreachable", {"target": TARGETS["unreachable"], "kind": "ntp"})],
                   quiet + ["ApplianceReferenceSwitched", "ApplianceErrorBoundHigh"]),
        "holdover_expired": ([("ApplianceHoldoverBeyondPromise", {}), ("ApplianceNotTraceable", {})],
                             ["ApplianceDown", "ApplianceIntegritySuspect", "ApplianceAuditChainBroken",
                              "ApplianceRestarted"]),
        # ten minutes after the holdover: everything quiet again (the reference never changed)
        "locked_again": ([], quiet + ["ApplianceErrorBoundHigh"]),
        "sky_blocked": ([("ApplianceReferenceSwitched", {}), ("ApplianceNotTraceable", {})],
                        ["ApplianceDown", "ApplianceIntegritySuspect", "ApplianceAuditChainBroken",
                         "ApplianceRestarted"]),
        "spoofed": ([("ApplianceIntegritySuspect", {"code": "gnss-spoofing"})],
                    ["ApplianceDown", "ApplianceAuditChainBroken", "ApplianceRestarted"]),
        "audit_broken": ([("ApplianceAuditChainBroken", {"code": "audit-truncated"})],
                         ["ApplianceDown", "ApplianceIntegritySuspect", "ApplianceRestarted"]),
        "restarted": ([("ApplianceRestarted", {})],
                      ["ApplianceDown", "ApplianceNotTraceable", "ApplianceHoldoverBeyondPromise",
                       "ApplianceIntegritySuspect", "ApplianceAuditChainBroken"]),
    }


def promtool_test(scrapes: dict[str, str]) -> dict:
    cases = []
    plan = expectations()
    for index, (phase, text) in enumerate(scrapes.items()):
        at_min = index * PHASE_MIN + PHASE_MIN - 1  # the state's last sample
        firing, silent = plan[phase]
        by_name: dict[str, list[dict]] = {}
        for name, labels in firing:
            by_name.setdefault(name, []).append(alert(name, **labels))
        # the error bound's rule fires exactly when the scraped bound is over its 1 us
        bound = next(v for k, v in series_of(text).items() if k.startswith("appliance_error_bound_seconds{"))
        if "ApplianceErrorBoundHigh" in silent:
            assert not bound > 1e-6, (phase, bound)
        elif bound > 1e-6:
            by_name["ApplianceErrorBoundHigh"] = [alert("ApplianceErrorBoundHigh")]
        else:
            by_name["ApplianceErrorBoundHigh"] = []
        for name in silent:
            by_name.setdefault(name, [])
        for name, alerts in by_name.items():
            cases.append({"eval_time": f"{at_min}m", "alertname": name, "exp_alerts": alerts})
    return {"rule_files": [str(RULES)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": timeline(scrapes), "alert_rule_test": cases}]}


def test_the_alert_rules_fire_in_each_state_of_a_real_appliance(scrapes: dict[str, str], tmp_path: Path) -> None:
    checked = subprocess.run([require("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    test = tmp_path / "appliance-rules.test.yml"
    test.write_text(yaml.safe_dump(promtool_test(scrapes), sort_keys=False, width=1000))
    done = subprocess.run([require("promtool"), "test", "rules", str(test)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    assert "SUCCESS" in done.stdout


def test_a_rule_that_names_a_series_the_appliance_does_not_export_is_caught(scrapes: dict[str, str],
                                                                           tmp_path: Path) -> None:
    # the check above is not vacuous: the holdover rule spelled with a metric the appliance lacks fails promtool
    rules = RULES.read_text().replace('appliance_alarm{code="clock-holdover-expired"}',
                                      'appliance_holdover_expired')
    broken = tmp_path / "appliance-rules.yml"
    broken.write_text(rules)
    test = promtool_test(scrapes)
    test["rule_files"] = [str(broken)]
    path = tmp_path / "broken.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False, width=1000))
    done = subprocess.run([require("promtool"), "test", "rules", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and "ApplianceHoldoverBeyondPromise" in done.stdout + done.stderr


# --- the dashboard and the example configuration -------------------------------------------------------------------

def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [a["expr"] for a in board["annotations"]["list"] if "expr" in a]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            inner = re.fullmatch(r"label_values\((\w+), *\w+\)", var["definition"])
            assert inner, var["definition"]
            exprs.append(inner.group(1))
    return exprs


def test_the_dashboard_queries_parse_and_name_only_exported_series(scrapes: dict[str, str], tmp_path: Path) -> None:
    exported = {name.split("{")[0] for text in scrapes.values() for name in series_of(text)}
    queries = dashboard_queries()
    assert len(queries) >= 10
    named = set()
    for expr in queries:
        # metric names: identifiers that are not functions, keywords, labels or Grafana variables
        bare = re.sub(r'"[^"]*"', '""', expr)
        bare = re.sub(r"\{[^}]*\}", "{}", bare)
        bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
        bare = re.sub(r"\[[^\]]*\]", "", bare)  # range selectors
        for ident in re.findall(r"(?<![\w$])([A-Za-z_:][\w:]*)\b(?!\s*\()", bare):
            if ident not in KEYWORDS and not re.fullmatch(r"\d+\w*", ident):
                named.add(ident)
    unknown = named - exported - PROMETHEUS_OWN
    assert not unknown, f"the dashboard names series the appliance does not export: {sorted(unknown)}"
    assert {"appliance_time_traceable", "appliance_clock_class", "appliance_error_bound_seconds",
            "appliance_reference_active", "appliance_ntp_request_rate", "appliance_ptp_messages_total",
            "appliance_monitor_offset_seconds", "appliance_monitor_state"} <= named
    # every query parses: as recording rules, Grafana's variables given values
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e.replace("$__rate_interval", "5m").replace("$instance", ".*")}
        for i, e in enumerate(queries)]}]}
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False, width=1000))
    done = subprocess.run([require("promtool"), "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_example_configuration_passes_promtool(tmp_path: Path) -> None:
    for name in ("prometheus.yml", "appliance-rules.yml"):
        shutil.copy(CONFIG.parent / name, tmp_path / name)
    for job in yaml.safe_load(CONFIG.read_text())["scrape_configs"]:  # the files it names, beside it
        (tmp_path / job["tls_config"]["ca_file"]).write_text("")
        (tmp_path / job["authorization"]["credentials_file"]).write_text("token\n")
    done = subprocess.run([require("promtool"), "check", "config", str(tmp_path / "prometheus.yml")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 10 rules found" in done.stdout


def test_one_prometheus_scrapes_two_appliances(tmp_path: Path) -> None:
    """The README's set-up on loopback: two appliances, one Prometheus with the shipped rules, a token each."""
    binary = require("prometheus")
    webs, procs, states = [free_tcp_port(), free_tcp_port()], [], []
    try:
        for i, web in enumerate(webs):
            state = tmp_path / f"state-{i}"
            state.mkdir()
            states.append(state)
            procs.append(appliance("run", "--set", f"state_dir={state}", "--set", "clock.warmup_s=0",
                                   "--set", "web.listen=127.0.0.1", "--set", f"web.port={web}"))
        tokens = []
        for state in states:
            add = subprocess.run([sys.executable, "-m", "appliance", "user", "add", "prometheus", "--role", "viewer",
                                  "--password-stdin", "--set", f"state_dir={state}"], input="a-long-password-1\n",
                                 capture_output=True, text=True, env=ENV, cwd=REPO, timeout=60)
            assert add.returncode == 0, add.stderr
            made = subprocess.run([sys.executable, "-m", "appliance", "user", "token", "prometheus", "--set",
                                   f"state_dir={state}"], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=60)
            assert made.returncode == 0, made.stderr
            tokens.append(made.stdout.strip().splitlines()[-1].split()[-1])
        conf = yaml.safe_load(CONFIG.read_text())
        shutil.copy(RULES, tmp_path / "appliance-rules.yml")
        conf["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        assert len(conf["scrape_configs"]) == 2
        for job, web, token in zip(conf["scrape_configs"], webs, tokens):  # the example's jobs, on loopback
            path = tmp_path / f"{job['job_name']}.token"
            path.write_text(token + "\n")
            job["authorization"]["credentials_file"] = str(path)
            job["tls_config"] = {"insecure_skip_verify": True}  # each appliance's own self-signed certificate
            job["static_configs"] = [{"targets": [f"127.0.0.1:{web}"]}]
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(conf))
        port = free_tcp_port()
        prom = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append(prom)
        query = urllib.parse.quote("appliance_uptime_seconds")
        end, found = time.monotonic() + 120, set()
        while time.monotonic() < end and len(found) < 2:
            time.sleep(1)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query={query}", timeout=5) as r:
                    result = json.load(r)["data"]["result"]
            except OSError:
                continue
            found = {row["metric"]["instance"] for row in result}
        assert found == {f"127.0.0.1:{w}" for w in webs}, found
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=5) as r:
            groups = json.load(r)["data"]["groups"]
        assert {rule["name"] for g in groups for rule in g["rules"]} >= {"ApplianceNotTraceable", "ApplianceRestarted"}
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
