/* The console's live parts: polls the REST API and draws with ECharts (served by the appliance itself). */
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const page = document.body.dataset.page;
  const $ = (id) => document.getElementById(id);
  const charts = {};

  async function getJSON(url) {
    const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (r.status === 401) { window.location = "/login"; throw new Error("logged out"); }
    if (!r.ok) throw new Error(url + ": " + r.status);
    return r.json();
  }
  function text(id, value) { const el = $(id); if (el && el.textContent !== String(value)) el.textContent = value; }
  function age(ns) {
    if (ns === null || ns === undefined) return "-";
    let s = Math.max(0, Math.floor(ns / 1e9));
    const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60; s = s % 60;
    return (h ? h + "h" : "") + String(m).padStart(h ? 2 : 1, "0") + "m" + String(s).padStart(2, "0") + "s";
  }
  function row(cells) {
    const tr = document.createElement("tr");
    for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
    return tr;
  }
  function alarms(list) {
    const ul = $("alarms"); if (!ul) return;
    ul.replaceChildren(...list.filter((a) => a.raised).map((a) => {
      const li = document.createElement("li"); li.className = a.severity; li.textContent = "[" + a.severity + "] " + a.text; return li;
    }));
    if (!ul.children.length) { const li = document.createElement("li"); li.className = "none"; li.textContent = "none"; ul.appendChild(li); }
  }
  function ntsDetail(n, t) {
    const age = n.cookie_key_age_s === null || n.cookie_key_age_s === undefined ? "?" : Math.floor(n.cookie_key_age_s / 3600) + " h";
    return "; NTS " + (n.alive ? "" : "KE DOWN, ") + (t.nts || 0) + " replies, " + (t.nts_nak || 0) + " NAK, " +
      n.sessions + " KE sessions, " + (n.tls_failures + n.ke_errors) + " KE failures, cookie key " + n.cookie_key_id + " " + age + " old";
  }
  function ptpAuthDetail(a) {
    return "; signed (spp " + a.spp + ", key " + a.key_id + ", " + a.algorithm + "): " + a.signed + " sent, " +
      a.verified + " verified, " + a.refused_total + " refused" + (a.accept_unsigned ? ", " + a.accepted_unsigned + " unsigned accepted" : "");
  }
  function outputDetail(name, o) {
    if (o.error) return "error: " + o.error;
    if (name === "ntp" && o.totals) return (o.totals.replies || 0) + " replies" + (o.nts ? ntsDetail(o.nts, o.totals) : "");
    if (name === "ptp") return (o.port_state || o.state || "") + (o.profile ? " " + o.profile : "") + (o.security ? ptpAuthDetail(o.security) : "") +
      (o.gptp ? (o.gptp.as_capable ? "; asCapable, link " + o.gptp.link_delay_ns + " ns" : "; NOT asCapable: " + o.gptp.why_not) : "");
    if (name === "pps") return o.seconds + " s, " + o.squelched + " squelched";
    if (name === "irig") return o.format + ", " + o.frames + " frames, quality " + o.time_quality;
    if (name === "serial") return (o.format || "") + " " + (o.written || 0) + " written";
    if (name === "web") return o.listen + ":" + o.port;
    if (name === "snmp") return o.listen + ":" + o.port + ", " + o.notifications + " notifications sent";
    if (name === "audit") return o.records + " records" + (o.failures ? ", " + o.failures + " not written" : "");
    if (name === "cpu_latency") return "wake-up latency held at " + o.latency_us + " µs or less";
    return "";
  }
  function chart(id) {
    if (!charts[id]) { const el = $(id); if (!el || !window.echarts) return null; charts[id] = echarts.init(el); }
    return charts[id];
  }

  async function dashboard() {
    const s = await getJSON("/api/v1/status");
    const c = s.clock;
    const st = $("state");
    if (st) { st.textContent = c.state; st.className = "state state-" + c.state; }
    text("reason", c.reason);
    text("clock-class", c.clock_class);
    text("error-bound", c.error_bound_ns === null ? "-" : c.error_bound_ns);
    text("since-lock", c.locked_since_ns ? age(s.at_tai_ns - c.locked_since_ns) : "-");
    text("reference", s.receiver.name + ": " + s.receiver.state);
    text("utc", s.utc_text);
    const tb = document.querySelector("#outputs tbody");
    if (tb) tb.replaceChildren(...Object.entries(s.outputs).map(([n, o]) =>
      row([n, o.enabled === false ? "disabled" : (o.error ? "FAULT" : "enabled"), outputDetail(n, o)])));
    integrity(s.integrity, ((s.references || {}).rows || []).find((r) => r.name === "gnss"));
    references(s.references || {}, (s.clock || {}).state);
    alarms(s.alarms);
  }
  function ns(v) {
    if (v === null || v === undefined) return "-";
    const a = Math.abs(v);
    return a >= 1e6 ? (v / 1e6).toFixed(2) + " ms" : a >= 1e3 ? (v / 1e3).toFixed(2) + " µs" : v.toFixed(0) + " ns";
  }
  function noReference(state) {  // what the clock does without one: it holds over only when it learned enough
    return state === "HOLDOVER" || state === "HOLDOVER_EXPIRED" ? "none (holdover)"
      : state ? "none (" + String(state).toLowerCase() + ")" : "none";
  }
  function references(rs, clockState) {
    const tb = document.querySelector("#references tbody"); if (!tb) return;
    if (rs.active !== undefined) text("reference", rs.active || noReference(clockState));
    text("references-summary", "active: " + (rs.active || noReference(clockState)) + (rs.pinned ? ", pinned to " + rs.pinned : "") +
      ", " + (rs.switches || 0) + " switches");
    const operator = document.querySelector("#references th:last-child").textContent === "Operator";
    tb.replaceChildren(...(rs.rows || []).map((r) => {
      const tr = row([r.priority, (r.active ? "▶ " : "") + r.name + (r.pinned ? " (pinned)" : ""), r.state, ns(r.offset_ns),
        ns(r.jitter_ns), ns(r.accuracy_ns), r.state === "qualified" ? "" : r.reason]);
      tr.id = "reference-" + r.name;
      if (operator) {
        const td = document.createElement("td");
        for (const action of ["pin", r.state === "disabled" ? "enable" : "disable"]) {
          const b = document.createElement("button"); b.textContent = action; b.dataset.reference = action;
          b.addEventListener("click", () => referenceCommand(action, r.name)); td.appendChild(b);
        }
        tr.appendChild(td);
      }
      return tr;
    }));
  }
  async function referenceCommand(action, name) {
    const r = await fetch("/api/v1/references", { method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf }, body: JSON.stringify({ action, name }) });
    const body = await r.json().catch(() => ({}));
    text("command-result", r.ok ? body.done + "; active: " + (body.active || "none") : "refused: " + (body.error || r.status));
    dashboard();
  }
  const LEVELS = ["ok", "suspect", "jammed", "spoofed"];
  function integrity(g, gref) {  // gref: the GNSS reference's row (used, or idle: nothing to check)
    const lv = $("integrity-level"); if (!lv) return;
    const on = g && g.enabled;
    const level = on ? (LEVELS.includes(g.level) ? g.level : "unknown") : "off";
    const label = !g ? "-" : !on ? "off" : level === "ok" ? "ok" : String(g.level).toUpperCase();
    if (lv.textContent !== label) lv.textContent = label;
    lv.className = "state integrity-" + level;
    const used = $("integrity-usable");
    if (used) used.className = on && !g.usable ? "bad" : "muted";
    const idle = gref && (gref.state === "no-signal" || gref.state === "unusable");
    text("integrity-usable", !g ? "" : !on ? "checks disabled" : !g.usable ? "reference REJECTED"
      : !gref || gref.active ? "reference used" : "reference not in use (" + gref.state + ")");
    text("integrity-override", !on ? "" : g.override !== "auto" ? "operator override: " + g.override : g.action === "monitor" ? "monitor only" : "");
    text("integrity-requalify", on && g.requalify_in_s !== null && g.requalify_in_s !== undefined ? "qualifies again in " + Math.ceil(g.requalify_in_s) + " s" : "");
    text("integrity-reason", !on ? "" : g.reasons && g.reasons.length ? g.reasons[0]
      : level === "ok" ? (idle ? "no data to check" : "all checks ok") : "");
  }
  async function post(url, action) {
    const r = await fetch(url, { method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf }, body: JSON.stringify({ action }) });
    return [r, await r.json().catch(() => ({}))];
  }
  async function command(action) {
    const [r, body] = await post("/api/v1/holdover", action);
    text("command-result", r.ok ? "holdover " + action + ": " + body.state : "refused: " + (body.error || r.status));
    dashboard();
  }
  async function integrityCommand(action, then) {
    const [r, body] = await post("/api/v1/integrity", action);
    text("command-result", r.ok ? "integrity " + action + ": override " + body.override + ", verdict " + body.level +
      ", reference " + (body.usable ? "used" : "REJECTED") : "refused: " + (body.error || r.status));
    then();
  }

  const COLORS = { GPS: "#1f77b4", GLONASS: "#d62728", Galileo: "#2ca02c", BeiDou: "#ff7f0e", QZSS: "#9467bd", SBAS: "#8c564b", NavIC: "#e377c2" };
  function where(p) {
    return p.lat_deg.toFixed(6) + ", " + p.lon_deg.toFixed(6) + (p.alt_m !== null && p.alt_m !== undefined ? ", " + p.alt_m.toFixed(1) + " m" : "");
  }
  function num(v, digits) { return v === null || v === undefined ? "-" : Number(v).toFixed(digits); }
  function integrityChecks(g) {
    const sv = g && g.survey;
    text("rx-survey", !sv ? "-" : sv.state === "fixed" ? "fixed (" + sv.source + ")" : sv.state);
    text("survey-detail", !sv ? "-" : sv.state === "fixed" ? (sv.home ? where(sv.home) : "-") :
      "surveying " + num(sv.elapsed_s, 0) + " / " + num(sv.duration_s, 0) + " s, " + sv.samples + " fixes");
    text("survey-scatter", sv && sv.source === "survey" && sv.std_m !== null && sv.std_m !== undefined ? "scatter " + num(sv.std_m, 1) + " m rms" : "");
    const detail = $("survey-detail"); if (detail && sv) detail.title = sv.reason || "";
    const on = g && g.enabled;
    text("gnss-integrity", !g ? "-" : !on ? "off" : g.level === "ok" ? "ok" : String(g.level).toUpperCase());
    const gi = $("gnss-integrity");
    if (gi) gi.className = "value small integrity-" + (!on ? "off" : LEVELS.includes(g.level) ? g.level : "unknown");
    text("gnss-integrity-usable", !on ? (g ? "checks disabled" : "") : (g.usable ? "reference used" : "reference REJECTED") +
      (g.override !== "auto" ? " (override " + g.override + ")" : ""));
    const tb = document.querySelector("#integrity-findings tbody");
    if (tb) tb.replaceChildren(...((g && g.findings) || []).map((f) => {
      const tr = row([f.detector, f.verdict, num(f.score, 2), f.reason]); tr.className = "verdict-" + f.verdict; return tr;
    }));
    const ntp = (g && g.ntp) || {};
    const el = $("integrity-ntp");
    if (el) {
      const failing = Object.entries(ntp.servers || {}).filter(([, st]) => st.error).map(([name]) => name);
      let line = "";
      if (ntp.offset_ms !== undefined && ntp.offset_ms !== null)
        line = "NTP cross-check via " + ntp.server + ": " + (ntp.offset_ms >= 0 ? "+" : "") + ntp.offset_ms.toFixed(2) + " ms (± " + num(ntp.uncertainty_ms, 2) + " ms)";
      if (failing.length) line += (line ? "; " : "NTP cross-check ") + "failing: " + failing.join(", ");
      text("integrity-ntp", line);
      el.hidden = !line;
    }
  }
  async function gnss() {
    const d = await getJSON("/api/v1/status");
    const e = d.receiver.last_epoch;
    text("rx-state", d.receiver.state);
    text("rx-fix", e ? String(e.fix_mode) + (e.time_only ? " (fixed position, time only)" : "") : "-");
    text("rx-position", e && e.position ? where(e.position) : "-");
    integrityChecks(d.integrity);
    const sats = d.satellites;
    const bars = chart("cn0");
    const withCn0 = sats.filter((s) => s.cn0_dbhz !== null);
    if (bars) bars.setOption({
      title: { text: "C/N0 (dB-Hz)", left: "center", textStyle: { fontSize: 13 } }, grid: { bottom: 60 },
      xAxis: { type: "category", data: withCn0.map((s) => s.constellation.slice(0, 3) + " " + s.prn), axisLabel: { rotate: 60 } },
      yAxis: { type: "value", min: 0, max: 60 },
      series: [{ type: "bar", data: withCn0.map((s) => ({ value: s.cn0_dbhz, itemStyle: { color: COLORS[s.constellation] || "#555", opacity: s.used ? 1 : 0.4 } })) }],
    }, true);
    const tb = document.querySelector("#sats tbody");
    if (tb) tb.replaceChildren(...sats.map((s) => row([s.constellation, s.prn, s.elevation_deg ?? "-", s.azimuth_deg ?? "-", s.cn0_dbhz ?? "-", s.used ? "yes" : "no"])));
  }

  async function alarmsPage() { const s = await getJSON("/api/v1/status"); alarms(s.alarms); }

  function every(fn, ms) { const run = () => fn().catch((e) => console.warn(e)); run(); return setInterval(run, ms); }
  window.addEventListener("resize", () => Object.values(charts).forEach((c) => c.resize()));
  if (page === "dashboard") {
    every(dashboard, 1000);
    for (const b of document.querySelectorAll("button[data-action]")) b.addEventListener("click", () => command(b.dataset.action));
    for (const b of document.querySelectorAll("button[data-integrity]")) b.addEventListener("click", () => integrityCommand(b.dataset.integrity, dashboard));
    const unpin = $("reference-unpin"); if (unpin) unpin.addEventListener("click", () => referenceCommand("unpin", ""));
  } else if (page === "gnss") {
    every(gnss, 2000);
    for (const b of document.querySelectorAll("button[data-integrity]")) b.addEventListener("click", () => integrityCommand(b.dataset.integrity, gnss));
  }
  else if (page === "alarms") every(alarmsPage, 2000);
})();
