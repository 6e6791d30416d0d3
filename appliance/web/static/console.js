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
  function outputDetail(name, o) {
    if (o.error) return "error: " + o.error;
    if (name === "ntp" && o.totals) return (o.totals.replies || 0) + " replies";
    if (name === "ptp") return (o.port_state || o.state || "") + (o.profile ? " " + o.profile : "");
    if (name === "pps") return o.seconds + " s, " + o.squelched + " squelched";
    if (name === "irig") return o.format + ", " + o.frames + " frames, quality " + o.time_quality;
    if (name === "serial") return (o.format || "") + " " + (o.written || 0) + " written";
    if (name === "web") return o.listen + ":" + o.port;
    if (name === "snmp") return o.listen + ":" + o.port + ", " + o.notifications + " notifications sent";
    if (name === "audit") return o.records + " records" + (o.failures ? ", " + o.failures + " not written" : "");
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
    alarms(s.alarms);
  }
  async function command(action) {
    const r = await fetch("/api/v1/holdover", { method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf }, body: JSON.stringify({ action }) });
    const body = await r.json().catch(() => ({}));
    text("command-result", r.ok ? "holdover " + action + ": " + body.state : "refused: " + (body.error || r.status));
    dashboard();
  }

  const COLORS = { GPS: "#1f77b4", GLONASS: "#d62728", Galileo: "#2ca02c", BeiDou: "#ff7f0e", QZSS: "#9467bd", SBAS: "#8c564b", NavIC: "#e377c2" };
  async function gnss() {
    const d = await getJSON("/api/v1/satellites");
    const e = d.receiver.last_epoch;
    text("rx-state", d.receiver.state);
    text("rx-fix", e ? String(e.fix_mode) + (e.time_only ? " (fixed position, time only)" : "") : "-");
    text("rx-position", e && e.position ? e.position.lat_deg.toFixed(6) + ", " + e.position.lon_deg.toFixed(6) + (e.position.alt_m !== null ? ", " + e.position.alt_m.toFixed(1) + " m" : "") : "-");
    text("rx-survey", e && e.time_only ? "position held" : "navigating");
    const sats = d.satellites;
    const byConst = {};
    for (const s of sats) (byConst[s.constellation] = byConst[s.constellation] || []).push(s);
    const sky = chart("skyplot");
    if (sky) sky.setOption({
      title: { text: "Sky", left: "center", textStyle: { fontSize: 13 } }, legend: { bottom: 0 },
      polar: { radius: "72%" },
      angleAxis: { type: "value", min: 0, max: 360, startAngle: 90, clockwise: true, interval: 45,
        axisLabel: { formatter: (v) => ({ 0: "N", 90: "E", 180: "S", 270: "W" }[v] || "") } },
      radiusAxis: { type: "value", min: 0, max: 90, interval: 30, axisLabel: { formatter: (v) => (90 - v) + "°" } },
      tooltip: { formatter: (p) => p.seriesName + " " + p.data[2] + ": el " + (90 - p.data[0]) + "°, az " + p.data[1] + "°" },
      series: Object.entries(byConst).map(([name, list]) => ({ name, type: "scatter", coordinateSystem: "polar", symbolSize: 14,
        itemStyle: { color: COLORS[name] || "#555" },
        data: list.filter((s) => s.elevation_deg !== null && s.azimuth_deg !== null).map((s) => ({
          value: [90 - s.elevation_deg, s.azimuth_deg, s.prn], itemStyle: { opacity: s.used ? 1 : 0.35 } })) })),
    }, true);
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

  function line(id, title, unit, points) {
    const ch = chart(id); if (!ch) return;
    ch.setOption({ title: { text: title, left: "center", textStyle: { fontSize: 13 } }, tooltip: { trigger: "axis" },
      grid: { left: 70, right: 20 }, xAxis: { type: "time" }, yAxis: { type: "value", name: unit, scale: true },
      series: [{ type: "line", showSymbol: false, data: points }] }, true);
  }
  function loglog(id, title, unit, taus, series) {
    const ch = chart(id); if (!ch) return;
    ch.setOption({ title: { text: title, left: "center", textStyle: { fontSize: 13 } }, tooltip: { trigger: "axis" },
      legend: { bottom: 0 }, grid: { left: 70, right: 20, bottom: 50 },
      xAxis: { type: "log", name: "τ (s)" }, yAxis: { type: "log", name: unit },
      series: series.map(([name, values, dashed]) => ({ name, type: "line", showSymbol: !dashed,
        lineStyle: dashed ? { type: "dashed" } : {}, data: taus.map((t, i) => [t, values[i]]).filter((p) => p[1] !== null && p[1] > 0) })) }, true);
  }
  async function plots() {
    const since = $("window").value;
    $("csv").href = "/api/v1/quality.csv?since=" + since;
    const q = await getJSON("/api/v1/quality?since=" + since + "&max_points=1200");
    const t = (r) => r.posix_ms;
    line("plot-phase", "Phase offset", "ns", q.rows.filter((r) => r.phase_offset_ns !== null).map((r) => [t(r), r.phase_offset_ns]));
    line("plot-frequency", "Frequency", "ppb", q.rows.filter((r) => r.frequency_ppb !== null).map((r) => [t(r), r.frequency_ppb]));
    line("plot-bound", "Error bound", "ns", q.rows.filter((r) => r.error_bound_ns !== null).map((r) => [t(r), r.error_bound_ns]));
    const st = await getJSON("/api/v1/stability?since=-3600");
    text("stability-note", st.samples + " one-second phase samples" + (st.note ? ": " + st.note : ""));
    if (!st.taus_s.length) return;
    loglog("plot-mtie", "MTIE", "ns", st.taus_s, [["MTIE", st.mtie_ns], ["PRTC-A", st.masks["PRTC-A"].mtie_ns, true], ["PRTC-B", st.masks["PRTC-B"].mtie_ns, true]]);
    loglog("plot-tdev", "TDEV", "ns", st.taus_s, [["TDEV", st.tdev_ns], ["PRTC-A", st.masks["PRTC-A"].tdev_ns, true], ["PRTC-B", st.masks["PRTC-B"].tdev_ns, true]]);
    loglog("plot-adev", "ADEV", "", st.taus_s, [["ADEV", st.adev]]);
  }
  async function alarmsPage() { const s = await getJSON("/api/v1/status"); alarms(s.alarms); }

  function every(fn, ms) { const run = () => fn().catch((e) => console.warn(e)); run(); return setInterval(run, ms); }
  window.addEventListener("resize", () => Object.values(charts).forEach((c) => c.resize()));
  if (page === "dashboard") {
    every(dashboard, 1000);
    for (const b of document.querySelectorAll("button[data-action]")) b.addEventListener("click", () => command(b.dataset.action));
  } else if (page === "gnss") every(gnss, 2000);
  else if (page === "plots") { every(plots, 10000); $("window").addEventListener("change", () => plots()); }
  else if (page === "alarms") every(alarmsPage, 2000);
})();
