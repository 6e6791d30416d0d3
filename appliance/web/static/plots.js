/* The Plots page: phase, frequency and error bound on one shared time axis (zoom linked, y fitted to what is shown),
   shaded by clock state, with the audit trail's alarms, setting changes and reference switches as markers; and MTIE,
   TDEV and ADEV of the locked seconds against the G.8272 PRTC masks with the verdict in words.  Loaded by plots.html
   only; draws with the vendored ECharts. */
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const GROUP = "timeline";
  const TIMELINE = ["plot-phase", "plot-frequency", "plot-bound"];
  const GRID = { left: 86, right: 28, top: 34, bottom: 28 };  // the same on every timeline chart: the axes line up
  const STATES = {  // shading by clock state: calm for LOCKED, warmer as the clock knows less
    LOCKED: { color: "rgba(26,127,55,0.07)" },
    ACQUIRING: { color: "rgba(9,105,218,0.13)" },
    HOLDOVER: { color: "rgba(191,135,0,0.20)" },
    HOLDOVER_EXPIRED: { color: "rgba(188,76,0,0.24)" },
    FREERUN: { color: "rgba(207,34,46,0.16)" },
  };
  const MARKERS = {  // audit kinds shown as markers: colour, line type, short label
    "alarm.raised": { color: "#cf222e", type: "solid", label: "alarm", what: "Alarm raised" },
    "alarm.cleared": { color: "#1a7f37", type: "dashed", label: "clear", what: "Alarm cleared" },
    "config.change": { color: "#8250df", type: "solid", label: "config", what: "Setting changed" },
    "reference.switch": { color: "#0969da", type: "solid", label: "ref", what: "Reference switch" },
    "clock.step": { color: "#1d232b", type: "solid", label: "step", what: "Clock step" },
    "command": { color: "#57606a", type: "dotted", label: "cmd", what: "Operator command" },
  };
  const MASK_STYLE = { "PRTC-A": { color: "#bc4c00", type: "dashed" }, "PRTC-B": { color: "#8250df", type: "dotted" } };
  const charts = {};
  let last = null;  // the last quality, markers and stability answers: the toggle redraws without asking again

  const { getJSON, text } = window.consoleApi;  // console.js, loaded before this script
  function chart(id) {
    if (!charts[id]) { const el = $(id); if (!el || !window.echarts) return null; charts[id] = echarts.init(el); }
    return charts[id];
  }
  function escape(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }
  function fmtNs(v, digits) {  // a time error in its readable unit
    if (v === null || v === undefined || !isFinite(v)) return "-";
    const a = Math.abs(v), d = digits === undefined ? 3 : digits;
    if (a >= 1e9) return +(v / 1e9).toPrecision(d) + " s";
    if (a >= 1e6) return +(v / 1e6).toPrecision(d) + " ms";
    if (a >= 1e3) return +(v / 1e3).toPrecision(d) + " µs";
    if (a >= 1 || a === 0) return +v.toPrecision(d) + " ns";
    return +(v * 1e3).toPrecision(d) + " ps";
  }
  function fmtDuration(s) {
    s = Math.round(s);
    const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, r = s % 60;
    return h ? h + " h " + String(m).padStart(2, "0") + " min" : m ? m + " min " + String(r).padStart(2, "0") + " s" : r + " s";
  }
  function clock(ms) { return new Date(ms).toISOString().slice(11, 19); }

  // --- the timeline -----------------------------------------------------------------------------------------------

  /* Points of one quantity, with a null wherever a second is missing (or was dropped by the locked-only view), so the
     line is never drawn across a gap. */
  function points(rows, key) {
    const out = [];
    let prev = null;
    for (const r of rows) {
      if (prev && r.posix_ms - prev.posix_ms > 1500 * Math.max(1, prev.span_s)) out.push([prev.posix_ms + 1000 * prev.span_s, null]);
      out.push([r.posix_ms, r[key]]);
      prev = r;
    }
    return out;
  }
  /* Runs of one state as [state, start ms, end ms]; a row covers span_s seconds from its start. */
  function stateRuns(rows) {
    const runs = [];
    for (const r of rows) {
      const end = r.posix_ms + 1000 * r.span_s, cur = runs[runs.length - 1];
      if (cur && cur[0] === r.state && r.posix_ms - cur[2] < 1500) cur[2] = end;
      else runs.push([r.state, r.posix_ms, end]);
    }
    return runs;
  }
  function shading(runs) {
    return { silent: true, data: runs.map(([state, from, to]) => [
      { name: state, xAxis: from, itemStyle: { color: (STATES[state] || { color: "rgba(110,119,129,0.15)" }).color } }, { xAxis: to }]),
      label: { show: false } };
  }
  function markerLines(marks, withLabels) {
    return { symbol: ["none", "none"], animation: false,
      tooltip: { trigger: "item", formatter: (p) => escape(p.data.what) + " · " + clock(p.data.xAxis) + " UTC<br>" + escape(p.data.name) },
      data: marks.map((m) => ({ xAxis: m.posix_ms, name: m.text, what: m.what,
        lineStyle: { color: m.color, type: m.type, width: 1.4, opacity: 0.9 },
        label: withLabels ? { show: true, position: "insideEndTop", formatter: m.label, color: m.color, fontSize: 10 } : { show: false },
        emphasis: { label: { show: true, formatter: m.label }, lineStyle: { width: 2.4 } } })) };
  }
  function timeline(id, title, unit, series, opts) {
    const ch = chart(id); if (!ch) return;
    ch.group = GROUP;
    const zoom = currentZoom(ch);
    ch.setOption({
      animation: false,
      title: { text: title, left: 8, top: 6, textStyle: { fontSize: 13, fontWeight: 600, color: "#1d232b" } },
      tooltip: { trigger: "axis", axisPointer: { type: "line", snap: false },
        formatter: (ps) => clock(ps[0].axisValue) + " UTC<br>" + ps.filter((p) => p.value && p.value[1] !== null)
          .map((p) => escape(p.seriesName) + ": " + opts.fmt(p.value[1])).join("<br>") },
      grid: opts.slider ? { ...GRID, bottom: 56 } : GRID,
      xAxis: { type: "time", min: opts.x0, max: opts.x1, axisLabel: { hideOverlap: true, color: "#57606a" },
        splitLine: { show: true, lineStyle: { color: "#eef0f3" } } },
      yAxis: { type: opts.log ? "log" : "value", scale: true, name: unit, nameTextStyle: { color: "#57606a", align: "right" },
        axisLabel: { formatter: opts.axis, color: "#57606a" }, splitLine: { lineStyle: { color: "#eef0f3" } } },
      dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "filter", ...zoom },
        ...(opts.slider ? [{ type: "slider", xAxisIndex: 0, filterMode: "filter", height: 20, bottom: 6, ...zoom,
          labelFormatter: (v) => clock(v), borderColor: "#d8dde3" }] : [])],
      series: series.map((s, i) => ({ name: s.name, type: "line", showSymbol: false, connectNulls: false,
        lineStyle: { width: 1.3, color: s.color }, itemStyle: { color: s.color }, data: s.data,
        ...(i === 0 ? { markArea: shading(opts.runs), markLine: markerLines(opts.marks, opts.labels) } : {}) })),
    }, { replaceMerge: ["series", "dataZoom"] });
  }
  function currentZoom(ch) {  // keep what the engineer zoomed to across refreshes
    const o = ch.getOption && ch.getOption();
    const z = o && o.dataZoom && o.dataZoom[0];
    if (!z || (z.start === 0 && z.end === 100) || z.startValue === undefined) return { start: 0, end: 100 };
    return { startValue: z.startValue, endValue: z.endValue };
  }

  function markersOf(records, x0, x1) {
    return records.filter((r) => MARKERS[r.kind] && r.posix_ms >= x0 && r.posix_ms <= x1)
      .map((r) => ({ ...MARKERS[r.kind], kind: r.kind, posix_ms: r.posix_ms, utc: r.utc, text: r.text, actor: r.actor,
        color: r.kind === "alarm.raised" && r.detail && ["minor", "warning"].includes(r.detail.severity) ? "#bf8700" : MARKERS[r.kind].color }))
      .sort((a, b) => a.posix_ms - b.posix_ms);
  }
  function eventsTable(marks) {
    const tb = document.querySelector("#events tbody"); if (!tb) return;
    tb.replaceChildren(...marks.slice().reverse().map((m) => {
      const tr = document.createElement("tr"); tr.className = "event-" + m.kind.replace(".", "-");
      const cells = [m.utc, m.what, m.text, m.actor];
      cells.forEach((c, i) => { const td = document.createElement("td"); td.textContent = c;
        if (i === 1) { const sw = document.createElement("span"); sw.className = "swatch"; sw.style.background = m.color; td.prepend(sw); }
        tr.appendChild(td); });
      return tr;
    }));
    text("events-count", marks.length ? marks.length + " in this window" : "none in this window");
  }
  function summary(rows, lockedOnly) {
    const seconds = {};
    let total = 0;
    for (const r of rows) { seconds[r.state] = (seconds[r.state] || 0) + r.span_s; total += r.span_s; }
    const parts = Object.entries(seconds).sort((a, b) => b[1] - a[1])
      .map(([st, s]) => st + " " + fmtDuration(s) + " (" + Math.round(100 * s / total) + " %)");
    const locked = rows.filter((r) => r.state === "LOCKED" && r.phase_offset_ns !== null).map((r) => r.phase_offset_ns);
    let phase = "";
    if (locked.length) {
      const lo = Math.min(...locked), hi = Math.max(...locked);
      const rms = Math.sqrt(locked.reduce((a, v) => a + v * v, 0) / locked.length);
      phase = "; phase while locked " + fmtNs(lo) + " to " + fmtNs(hi) + ", rms " + fmtNs(rms);
    }
    text("window-summary", total ? fmtDuration(total) + " recorded: " + parts.join(", ") + phase +
      (lockedOnly ? ". Showing LOCKED seconds only." : "") : "No time-quality record in this window yet.");
  }

  function draw() {
    if (!last) return;
    const lockedOnly = $("locked-only").checked;
    const all = last.quality.rows;
    const rows = lockedOnly ? all.filter((r) => r.state === "LOCKED") : all;
    const until = last.until_ms;
    // the axis spans the data and the markers, not the empty part of the window before the first of them
    const marks = markersOf(last.audit, until - last.window_s * 1000, until);
    const times = [...(all.length ? [all[0].posix_ms] : []), ...marks.map((m) => m.posix_ms)];
    const x0 = times.length ? Math.min(...times) : until - last.window_s * 1000;
    const end = all.length ? all[all.length - 1].posix_ms + 1000 * all[all.length - 1].span_s : until;
    const x1 = Math.max(x0 + 1000, Math.min(until, Math.max(end, ...marks.map((m) => m.posix_ms + 1000))));
    const runs = stateRuns(all);
    const base = { x0, x1, runs, marks };
    timeline("plot-phase", "Phase offset to the reference", "", [{ name: "phase offset", color: "#0969da", data: points(rows, "phase_offset_ns") }],
      { ...base, fmt: (v) => fmtNs(v), axis: (v) => fmtNs(v, 4), labels: true });
    timeline("plot-frequency", "Frequency correction (ppb)", "", [{ name: "frequency", color: "#1a7f37", data: points(rows, "frequency_ppb") }],
      { ...base, fmt: (v) => v.toFixed(3) + " ppb", axis: (v) => +v.toPrecision(6) });
    timeline("plot-bound", "Error bound (advertised, log scale)", "", [{ name: "error bound", color: "#bc4c00", data: points(rows, "error_bound_ns") }],
      { ...base, fmt: (v) => fmtNs(v), axis: (v) => fmtNs(v, 3), log: true, slider: true });
    echarts.connect(GROUP);
    summary(all, lockedOnly);
    eventsTable(marks);
  }

  // --- stability --------------------------------------------------------------------------------------------------

  function loglog(id, title, unit, taus, series, fmt) {
    const ch = chart(id); if (!ch) return;
    ch.setOption({
      animation: false,
      title: { text: title, left: 8, top: 6, textStyle: { fontSize: 13, fontWeight: 600, color: "#1d232b" } },
      tooltip: { trigger: "axis", formatter: (ps) => "τ = " + ps[0].value[0] + " s<br>" +
        ps.map((p) => escape(p.seriesName) + ": " + fmt(p.value[1])).join("<br>") },
      legend: { bottom: 2, itemWidth: 22, textStyle: { color: "#57606a" } },
      grid: { left: 70, right: 24, top: 36, bottom: 58 },
      xAxis: { type: "log", name: "τ (s)", nameLocation: "middle", nameGap: 24, axisLabel: { color: "#57606a" },
        minorSplitLine: { show: true, lineStyle: { color: "#f3f4f6" } }, splitLine: { lineStyle: { color: "#e4e7eb" } } },
      yAxis: { type: "log", name: unit, axisLabel: { formatter: fmt, color: "#57606a" }, splitLine: { lineStyle: { color: "#e4e7eb" } } },
      series: series.map(([name, values, style]) => ({ name, type: "line", showSymbol: !style, symbolSize: 6,
        lineStyle: style ? { type: style.type, color: style.color, width: 1.6 } : { width: 2, color: "#0969da" },
        itemStyle: { color: style ? style.color : "#0969da" },
        data: taus.map((t, i) => [t, values[i]]).filter((p) => p[1] !== null && p[1] > 0) })),
    }, true);
  }
  function verdicts(st) {
    for (const name of ["PRTC-A", "PRTC-B"]) {
      const v = (st.verdicts || {})[name];
      const el = $("verdict-" + name); if (!el) continue;
      el.className = "mask-verdict " + (!v || v.passed === null ? "mask-none" : v.passed ? "mask-pass" : "mask-fail");
      const badge = el.querySelector(".badge"), line = el.querySelector(".verdict-text");
      badge.textContent = !v || v.passed === null ? "NO VERDICT" : v.passed ? "PASS" : "FAIL";
      line.textContent = v ? v.text : name + ": no verdict";
    }
    text("stability-note", st.samples + " locked one-second phase samples in " + st.stretches + " continuous stretch" +
      (st.stretches === 1 ? "" : "es") + " (longest " + fmtDuration(st.longest_s) + "); statistics never span a gap or a second in another state.");
  }
  function stability(st) {
    verdicts(st);
    const has = st.taus_s && st.taus_s.length;
    const box = $("stability-charts"); if (box) box.hidden = !has;  // nothing to draw before 16 s of locked record
    if (!has) return;
    const mask = (key) => Object.entries(st.masks).map(([name, m]) => [name + " mask", m[key], MASK_STYLE[name] || { type: "dashed", color: "#888" }]);
    loglog("plot-mtie", "MTIE (locked)", "", st.taus_s, [["MTIE", st.mtie_ns], ...mask("mtie_ns")], (v) => fmtNs(v));
    loglog("plot-tdev", "TDEV (locked)", "", st.taus_s, [["TDEV", st.tdev_ns], ...mask("tdev_ns")], (v) => fmtNs(v));
    loglog("plot-adev", "ADEV (locked)", "", st.taus_s, [["ADEV", st.adev]], (v) => Number(v).toExponential(1));
    for (const id of ["plot-mtie", "plot-tdev", "plot-adev"]) if (charts[id]) charts[id].resize();  // shown again
  }

  // --- fetching ---------------------------------------------------------------------------------------------------

  async function refresh() {
    const since = Number($("window").value);
    $("csv").href = "/api/v1/quality.csv?since=" + since;
    const kinds = Object.keys(MARKERS).join(",");
    const [quality, audit, st] = await Promise.all([
      getJSON("/api/v1/quality?since=" + since + "&max_points=1500"),
      getJSON("/api/v1/audit?kind=" + kinds + "&limit=500").catch(() => ({ records: [] })),
      getJSON("/api/v1/stability?since=" + since)]);
    const rows = quality.rows;
    // the window's end on the chart's (POSIX) axis: TAI minus the offset the rows carry
    const offsetMs = rows.length ? rows[rows.length - 1].posix_ms - rows[rows.length - 1].at_tai_ns / 1e6 : null;
    const untilMs = offsetMs === null ? Date.now() : quality.until_tai_ns / 1e6 + offsetMs;
    last = { quality, audit: audit.records || [], until_ms: untilMs, window_s: -since };
    draw();
    stability(st);
    text("stability-title", "Stability of the locked seconds, " + $("window").selectedOptions[0].textContent);
    text("updated", "updated " + clock(untilMs) + " UTC");
  }

  function start() {
    const remembered = window.localStorage && localStorage.getItem("plots.lockedOnly");  // this browser's last choice
    if (remembered === "1" || remembered === "0") $("locked-only").checked = remembered === "1";
    $("locked-only").addEventListener("change", () => {
      if (window.localStorage) localStorage.setItem("plots.lockedOnly", $("locked-only").checked ? "1" : "0");
      draw();
    });
    const run = () => refresh().catch((e) => { console.warn(e); text("updated", "update failed: " + e.message); });
    run();
    setInterval(run, 10000);
    $("window").addEventListener("change", () => { for (const id of TIMELINE) if (charts[id]) charts[id].dispatchAction({ type: "dataZoom", start: 0, end: 100 }); run(); });
    $("zoom-reset").addEventListener("click", () => { const ch = charts["plot-phase"]; if (ch) ch.dispatchAction({ type: "dataZoom", start: 0, end: 100 }); });
    window.addEventListener("resize", () => Object.values(charts).forEach((c) => c.resize()));
  }
  if (document.body.dataset.page === "plots") start();
})();
