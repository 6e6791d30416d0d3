/* The system page: polls /api/v1/system and redraws its cards and tables (loaded by system.html only). */
"use strict";
(function () {
  const POLL_MS = 3000;
  const $ = (id) => document.getElementById(id);

  function size(n) {
    if (n === null || n === undefined) return "-";
    if (n < 1024) return n + " B";
    if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
    if (n < 1073741824) return (n / 1048576).toFixed(1) + " MiB";
    return (n / 1073741824).toFixed(2) + " GiB";
  }
  function duration(s) {
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
    const two = (v) => String(v).padStart(2, "0");
    return (d ? d + "d " : "") + two(h) + "h " + two(m) + "m " + two(s % 60) + "s";
  }
  function text(id, value) { const el = $(id); if (el && el.textContent !== String(value)) el.textContent = value; }
  function row(cells, className) {
    const tr = document.createElement("tr");
    if (className) tr.className = className;
    for (const c of cells) {
      const td = document.createElement("td");
      if (typeof c === "object" && c !== null) { td.textContent = c.text; td.className = c.cls; } else td.textContent = c;
      tr.appendChild(td);
    }
    return tr;
  }
  function empty(message, cols) {
    const tr = row([{ text: message, cls: "muted" }], "empty");
    tr.firstChild.colSpan = cols;
    return tr;
  }
  function body(id, rows) { const tb = document.querySelector("#" + id + " tbody"); if (tb) tb.replaceChildren(...rows); }

  function processes(list) {
    body("sys-processes", list.map((p) => {
      const tr = row([p.label, p.pid || "-", p.alive ? "running" : "not running",
        p.cpu_percent === null ? "-" : p.cpu_percent.toFixed(1) + " %",
        p.cpu_s === null ? "-" : p.cpu_s.toFixed(2) + " s", size(p.rss_bytes), size(p.peak_rss_bytes),
        p.threads === null ? "-" : p.threads, p.restarts], p.alive ? "" : "down");
      tr.dataset.role = p.role;
      return tr;
    }));
  }
  function disk(d) {
    if (!d) return;
    if (d.error) { text("sys-disk-used", "-"); text("sys-disk-summary", d.error); return; }
    text("sys-disk-used", size(d.bytes));
    text("sys-disk-free", size(d.free_bytes) + " free of " + size(d.filesystem_bytes));
    const used = d.filesystem_bytes - d.free_bytes;
    text("sys-disk-summary", d.path + ": " + size(d.bytes) + " in files" + (d.complete ? "" : " (walk cut short: at least)") +
      "; its filesystem " + size(used) + " used, " + size(d.free_bytes) + " free (" +
      (d.filesystem_bytes ? (100 * d.free_bytes / d.filesystem_bytes).toFixed(0) : "-") + " % free)");
    const bar = $("sys-disk-bar");
    if (bar && d.filesystem_bytes) {
      const state = bar.querySelector(".state-share"), other = bar.querySelector(".other-share");
      const pct = (v) => Math.max(0, Math.min(100, 100 * v / d.filesystem_bytes));
      state.style.width = Math.max(0.4, pct(d.bytes)).toFixed(2) + "%";
      other.style.width = pct(Math.max(0, used - d.bytes)).toFixed(2) + "%";
    }
    body("sys-disk", (d.items || []).map((i) => row([{ text: i.name, cls: "name" }, { text: i.what || "", cls: "what" }, size(i.bytes),
      d.bytes ? (100 * i.bytes / d.bytes).toFixed(1) + " %" : "-"])));
  }
  function ntp(n) {
    if (!n.enabled) {
      text("ntp-rate", "-"); text("ntp-rate-window", "NTP not served");
      body("ntp-top", [empty("NTP not served", 3)]);
      return;
    }
    text("ntp-rate", n.request_rate_per_s === null ? "-" : n.request_rate_per_s.toFixed(2) + " /s");
    text("ntp-rate-window", n.rate_window_s ? "over the last " + Math.round(n.rate_window_s) + " s" : "measuring");
    text("ntp-requests", n.requests);
    text("ntp-replies", n.replies + " replies");
    text("ntp-kod", n.kod_sent);
    text("ntp-kod-detail", ["RATE", "DENY", "RSTR", "NTSN"].map((code) => code + " " + (n.kod[code] || 0)).join(", "));
    text("ntp-limited", n.rate_limited);
    text("ntp-top-title", "Busiest clients, last " + n.window_s + " s");
    const rows = n.top.map((c, i) => row([i + 1, { text: c.client, cls: "name" },
      c.requests + (c.error ? " (±" + c.error + ")" : "")]));
    if (!rows.length) rows.push(empty("no requests in the last minute", 3));
    body("ntp-top", rows);
  }

  async function refresh() {
    const r = await fetch("/api/v1/system", { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (r.status === 401) { window.location = "/login"; return; }
    if (!r.ok) throw new Error("/api/v1/system: " + r.status);
    const s = await r.json();
    text("sys-version", s.version);
    text("sys-mode", s.mode + " mode");
    text("sys-uptime", duration(s.uptime_s));
    text("sys-started", "since " + s.started_at_utc.replace("T", " ").replace("Z", " UTC"));
    text("sys-cpus", s.cpus);
    processes(s.processes);
    disk(s.disk);
    ntp(s.ntp);
    document.body.dataset.systemUpdated = String(Date.now());
  }
  const run = () => refresh().catch((e) => console.warn(e));
  run();
  setInterval(run, POLL_MS);
})();
