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
  let lastStatus = null, lastStatusAt = 0;
  async function status() {  // one fetch serves the verdict banner and the page in the same tick
    if (lastStatus && Date.now() - lastStatusAt < 500) return lastStatus;
    lastStatus = await getJSON("/api/v1/status"); lastStatusAt = Date.now();
    return lastStatus;
  }
  function utcOf(tai, s) {  // a TAI instant as UTC text, by the status's own offset (exact to the ms)
    const offsetNs = (s.leap ? s.leap.tai_utc_s : 37) * 1e9;
    return new Date((tai - offsetNs) / 1e6).toISOString().replace(/\.(\d{3})Z$/, ".$1Z");
  }
  async function verdict() {
    const box = $("verdict"); if (!box) return;
    const s = await status(), v = s.verdict; if (!v) return;
    box.className = "verdict verdict-" + v.level;
    text("verdict-headline", v.headline);
    text("verdict-since", "since " + v.since_utc + " (" + age(s.at_tai_ns - v.since_tai_ns) + ")");
    text("verdict-reason", v.reason);
    text("verdict-class", "clockClass " + s.clock.clock_class + " — " + v.clock_class_meaning + " · clockAccuracy 0x" +
      s.clock.clock_accuracy.toString(16).toUpperCase().padStart(2, "0") + " — " + v.clock_accuracy_meaning);
    const active = s.alarms.filter((a) => a.raised), worst = active.length ? active[0].severity : "none";
    const link = $("verdict-alarms");
    if (link) { link.className = "alarm-count sev-" + worst; text("verdict-alarms", active.length ? active.length + " alarm" +
      (active.length > 1 ? "s" : "") + " (" + worst + (active.some((a) => !a.acked_by) ? ", unacknowledged" : "") + ")" : "no alarms"); }
  }
  function confirmAction(title, detail, needReason) {  // the console's confirmation: a reason for the audit record
    const dlg = $("confirm"); if (!dlg || !dlg.showModal) return Promise.resolve(window.confirm(title) ? "" : null);
    text("confirm-title", title); text("confirm-detail", detail);
    const reason = $("confirm-reason"); reason.value = ""; reason.required = !!needReason;
    text("confirm-reason-label", needReason ? "Reason (goes into the audit record)" : "Comment (optional, goes into the audit record)");
    dlg.returnValue = ""; dlg.showModal(); reason.focus();
    return new Promise((resolve) => {
      dlg.onclose = () => resolve(dlg.returnValue === "confirm" ? reason.value.trim() : null);
    });
  }
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
  function alarms(list, now) {  // the dashboard's short list: severity, ID, text, up for, acknowledged
    const ul = $("alarms"); if (!ul) return;
    ul.replaceChildren(...list.filter((a) => a.raised).map((a) => {
      const li = document.createElement("li"); li.className = a.severity; li.id = "alarm-" + a.code;
      const sev = document.createElement("span"); sev.className = "sev sev-" + a.severity; sev.textContent = a.severity.toUpperCase();
      li.append(sev, " #" + a.id + " " + a.text + " — up " + age(now - a.since_ns) + (a.acked_by ? " · acknowledged by " + a.acked_by : ""));
      return li;
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
    const s = await status();
    const c = s.clock;
    const st = $("state");
    if (st) { st.textContent = c.state; st.className = "state state-" + c.state; }
    text("reason", c.reason);
    text("clock-class", c.clock_class);
    if (s.verdict) { text("clock-class-meaning", s.verdict.clock_class_meaning); text("clock-accuracy-meaning", s.verdict.clock_accuracy_meaning); }
    text("clock-accuracy", "0x" + c.clock_accuracy.toString(16).toUpperCase().padStart(2, "0"));
    text("error-bound", c.error_bound_ns === null ? "-" : c.error_bound_ns);
    text("since-lock", c.locked_since_ns ? age(s.at_tai_ns - c.locked_since_ns) : "-");
    text("reference", s.receiver.name + ": " + s.receiver.state);
    text("receiver-error", s.receiver.device_error ? s.receiver.name + " " + s.receiver.state + ": " + s.receiver.device_error : "");
    text("utc", s.utc_text);
    const tb = document.querySelector("#outputs tbody");
    if (tb) tb.replaceChildren(...Object.entries(s.outputs).map(([n, o]) =>
      row([n, o.enabled === false ? "disabled" : (o.error ? "FAULT" : "enabled"), outputDetail(n, o)])));
    const watched = (s.receivers || []).find((r) => r.watched);
    integrity(s.integrity, ((s.references || {}).rows || []).find((r) => r.name === (watched ? watched.name : "gnss")));
    references(s.references || {}, (s.clock || {}).state);
    receivers(s.receivers || [], (s.references || {}).rows || []);
    alarms(s.alarms, s.at_tai_ns);
    holdoverReadiness(s.clock);
  }
  function holdoverReadiness(c) {  // the clock says whether it can hold over now, or in how long
    const h = c.holdover_readiness || c.holdover; if (!$("holdover-ready")) return;
    text("holdover-ready", !h ? "-" : typeof h === "string" ? h : (h.text || h.summary || JSON.stringify(h)));
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
  function receivers(list, refRows) {  // every [[gnss]] receiver, with its reference's state
    const tb = document.querySelector("#receivers tbody"); if (!tb) return;
    const refs = Object.fromEntries(refRows.map((r) => [r.name, r]));
    text("receivers-summary", list.length + " GNSS receiver" + (list.length === 1 ? "" : "s") +
      " ([[gnss]] in the configuration); the first is watched by the integrity checks, the others are standbys on antennas of their own");
    tb.replaceChildren(...list.map((r) => {
      const ref = refs[r.name] || {};
      const tr = row([r.number, r.name, r.device, (r.model || "-") + (r.firmware ? ", " + r.firmware : ""), r.setup || "-",
        r.timing_mode || "-", r.antenna || "-", r.state + (r.device_error ? ": " + r.device_error : ""),
        r.satellites_used === null ? "-" : r.satellites_used + "/" + r.satellites_visible, r.pps_edges + " (" + r.paired + " paired)",
        r.cable_delay_ns + " ns", r.priority, (ref.state || "-") + (ref.active ? " (active)" : "")]);
      tr.id = "receiver-" + r.name;
      if (r.setup_detail) tr.children[4].title = r.setup_detail;
      return tr;
    }));
  }
  async function referenceCommand(action, name) {
    let reason = "";
    if (action === "pin" || action === "disable") {
      reason = await confirmAction(action === "pin" ? "Pin the clock to " + name + "?" : "Take " + name + " out of selection?",
        action === "pin" ? "The clock follows " + name + " whatever the other references say, until you choose automatic selection."
          : "The clock will not use " + name + " until you enable it again; if it is the active reference the clock switches or holds over.", true);
      if (reason === null) return;
    }
    const r = await fetch("/api/v1/references", { method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf }, body: JSON.stringify({ action, name, reason }) });
    const body = await r.json().catch(() => ({}));
    text("command-result", r.ok ? body.done + "; active: " + (body.active || "none") : "refused: " + (body.error || r.status));
    dashboard();
  }
  const LEVELS = ["ok", "suspect", "jammed", "spoofed"];
  function integrity(g, gref) {  // gref: the GNSS reference's row (used, or idle: nothing to check)
    const lv = $("integrity-level"); if (!lv) return;
    const on = g && g.enabled;
    const idle = gref && (gref.state === "no-signal" || gref.state === "unusable");
    const level = on ? (LEVELS.includes(g.level) ? g.level : "unknown") : "off";
    const label = !g ? "-" : !on ? "off" : level === "ok" ? (idle ? "no data" : "ok") : String(g.level).toUpperCase();
    if (lv.textContent !== label) lv.textContent = label;
    lv.className = "state integrity-" + (level === "ok" && idle ? "unknown" : level);
    const used = $("integrity-usable");
    if (used) used.className = on && !g.usable ? "bad" : "muted";
    text("integrity-usable", !g ? "" : !on ? "checks disabled" : !g.usable ? "reference REJECTED"
      : !gref || gref.active ? "reference used" : "reference not in use (" + gref.state + ")");
    text("integrity-override", !on ? "" : g.override !== "auto" ? "operator override: " + g.override : g.action === "monitor" ? "monitor only" : "");
    text("integrity-requalify", on && g.requalify_in_s !== null && g.requalify_in_s !== undefined ? "qualifies again in " + Math.ceil(g.requalify_in_s) + " s" : "");
    text("integrity-reason", !on ? "" : g.reasons && g.reasons.length ? g.reasons[0]
      : level === "ok" ? (idle ? "no data to check" : "all checks ok") : "");
  }
  async function post(url, action, reason) {
    const r = await fetch(url, { method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf }, body: JSON.stringify({ action, reason: reason || "" }) });
    return [r, await r.json().catch(() => ({}))];
  }
  const DANGEROUS = {  // actions that take the reference away from the clock: confirmed, with a reason
    "holdover:start": ["Force the clock into holdover?", "The clock stops following its reference and runs on its oscillator; its error bound grows until you release it."],
    "integrity:reject": ["Reject GNSS?", "The clock stops using the GNSS reference whatever the integrity checks say, until you choose Automatic."],
    "integrity:trust": ["Trust GNSS whatever the checks say?", "A spoofed or jammed receiver would then steer the clock. Use only when you know why the checks object."],
  };
  async function confirmed(key) {
    const d = DANGEROUS[key]; if (!d) return "";
    return confirmAction(d[0], d[1], true);
  }
  async function command(action) {
    const reason = await confirmed("holdover:" + action); if (reason === null) return;
    const [r, body] = await post("/api/v1/holdover", action, reason);
    text("command-result", r.ok ? "holdover " + action + ": " + body.state : "refused: " + (body.error || r.status));
    dashboard();
  }
  async function integrityCommand(action, then) {
    const reason = await confirmed("integrity:" + action); if (reason === null) return;
    const [r, body] = await post("/api/v1/integrity", action, reason);
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
    const rsu = d.receiver.setup || {};
    text("rx-model", (rsu.model || "") + (rsu.firmware ? ", " + rsu.firmware : "") || "model not reported");
    text("rx-mode", rsu.mode ? "receiver: " + rsu.mode : "");
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

  function cell(tr, value, cls) { const td = document.createElement("td"); if (cls) td.className = cls;
    if (value instanceof Node) td.appendChild(value); else td.textContent = value; tr.appendChild(td); return td; }
  function sevBadge(severity) { const b = document.createElement("span"); b.className = "sev sev-" + severity; b.textContent = severity.toUpperCase(); return b; }
  async function acknowledge(code, title) {
    const comment = await confirmAction("Acknowledge “" + title + "”?", "The alarm stays active until its cause clears; your name and the time go into the audit record.", false);
    if (comment === null) return;
    const r = await fetch("/api/v1/alarms/" + encodeURIComponent(code) + "/ack", { method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf }, body: JSON.stringify({ comment }) });
    const body = await r.json().catch(() => ({}));
    text("alarm-result", r.ok ? "acknowledged " + code : "refused: " + (body.error || r.status));
    lastStatus = null; alarmsPage();
  }
  async function alarmsPage() {
    const s = await status();
    const operator = !!$("alarm-table") && $("alarm-table").dataset.operator === "1";
    const tb = document.querySelector("#alarm-table tbody");
    if (tb) {
      const active = s.alarms.filter((a) => a.raised);
      tb.replaceChildren(...active.map((a) => {
        const tr = document.createElement("tr"); tr.id = "active-" + a.code; tr.className = "sev-row-" + a.severity;
        cell(tr, String(a.id), "num"); cell(tr, sevBadge(a.severity));
        const what = document.createElement("div"); const t = document.createElement("strong"); t.textContent = a.title;
        const d = document.createElement("div"); d.className = "muted"; d.textContent = a.text; what.append(t, d); cell(tr, what);
        cell(tr, utcOf(a.since_ns, s)); cell(tr, age(s.at_tai_ns - a.since_ns));
        const cause = document.createElement("div"); const pc = document.createElement("code"); pc.textContent = a.probable_cause;
        const cd = document.createElement("div"); cd.textContent = a.cause; cause.append(pc, cd);
        if (a.diagnosis) { const now = document.createElement("div"); now.className = "diagnosis"; now.textContent = "Now: " + a.diagnosis; cause.appendChild(now); }
        cell(tr, cause, "cause");
        cell(tr, a.action, "action");
        if (a.acked_by) cell(tr, "acknowledged by " + a.acked_by + " at " + utcOf(a.acked_at_ns, s) + (a.ack_comment ? " (" + a.ack_comment + ")" : ""), "acked");
        else if (operator) { const b = document.createElement("button"); b.textContent = "Acknowledge"; b.className = "ack";
          b.addEventListener("click", () => acknowledge(a.code, a.title)); cell(tr, b); }
        else cell(tr, "not acknowledged", "muted");
        return tr;
      }));
      if (!active.length) { const tr = document.createElement("tr"); const td = cell(tr, "No active alarm."); td.colSpan = 8; td.className = "muted"; tb.appendChild(tr); }
    }
    await alarmHistory(s);
  }
  async function alarmHistory(s) {
    const tb = document.querySelector("#alarm-history tbody"); if (!tb) return;
    const q = new URLSearchParams();
    for (const [id, key] of [["filter-severity", "severity"], ["filter-state", "state"], ["filter-q", "q"]]) { const v = $(id) && $(id).value; if (v) q.set(key, v); }
    const h = await getJSON("/api/v1/alarms?" + q.toString());
    tb.replaceChildren(...h.history.map((e) => {
      const tr = document.createElement("tr"); tr.className = e.open ? "open" : "cleared";
      cell(tr, String(e.id), "num"); cell(tr, sevBadge(e.severity)); cell(tr, e.title); cell(tr, e.text);
      cell(tr, utcOf(e.raised_at_ns, s)); cell(tr, e.open ? "still active" : utcOf(e.cleared_at_ns, s));
      cell(tr, age(e.duration_s * 1e9)); cell(tr, e.acked_by ? e.acked_by + " at " + utcOf(e.acked_at_ns, s) : "-");
      return tr;
    }));
    if (!h.history.length) { const tr = document.createElement("tr"); const td = cell(tr, "Nothing in the history matches."); td.colSpan = 8; td.className = "muted"; tb.appendChild(tr); }
    text("history-count", h.history.length + " episode" + (h.history.length === 1 ? "" : "s"));
  }

  function every(fn, ms) { const run = () => fn().catch((e) => console.warn(e)); run(); return setInterval(run, ms); }
  window.consoleApi = { getJSON, text };  // for the page scripts loaded after this one (plots.js)
  if ($("verdict")) every(verdict, 500);
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
  else if (page === "alarms") {
    every(alarmsPage, 2000);
    for (const id of ["filter-severity", "filter-state"]) { const el = $(id); if (el) el.addEventListener("change", () => status().then(alarmHistory)); }
    const fq = $("filter-q"); if (fq) fq.addEventListener("input", () => status().then(alarmHistory));
  }
})();
