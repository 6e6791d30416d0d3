/* The GNSS page's sky plot: every satellite at its azimuth (north up, east right) and elevation (zenith at the centre,
   the horizon at the edge), labelled G12, R5, E5, C23 ..., coloured by constellation, filled when used in the
   solution and hollow when only tracked, with its track over the last half hour (/api/v1/satellites "tracks").
   Loaded by gnss.html only; draws with the vendored ECharts. */
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const COLORS = { GPS: "#1f77b4", GLONASS: "#d62728", Galileo: "#2ca02c", BeiDou: "#ff7f0e", QZSS: "#9467bd", SBAS: "#8c564b", NavIC: "#e377c2" };  // as the C/N0 bars
  const LETTER = { GPS: "G", GLONASS: "R", Galileo: "E", BeiDou: "C", QZSS: "J", SBAS: "S", NavIC: "I" };
  const ORDER = ["GPS", "GLONASS", "Galileo", "BeiDou", "QZSS", "NavIC", "SBAS"];
  let sky = null;

  function label(s) { return (LETTER[s.constellation] || "?") + s.prn; }
  function color(name) { return COLORS[name] || "#57606a"; }
  /* A track as polar points [90 - elevation, azimuth], cut where it wraps through north (359° -> 0°) so the line does
     not cross the plot. */
  function track(points) {
    const out = [];
    let prev = null;
    for (const [az, el] of points) {
      if (prev !== null && Math.abs(az - prev) > 180) out.push(null);
      out.push([90 - el, az]);
      prev = az;
    }
    return out;
  }
  function tip(p) {
    const s = p.data && p.data.sat; if (!s) return "";
    return label(s) + " (" + s.constellation + " " + s.prn + ")<br>elevation " + s.elevation_deg + "°, azimuth " + s.azimuth_deg +
      "°<br>C/N0 " + (s.cn0_dbhz === null ? "not tracked" : s.cn0_dbhz + " dB-Hz") + "<br>" + (s.used ? "used in the solution" : "not used");
  }

  function draw(d) {
    const el = $("skyplot"); if (!el || !window.echarts) return;
    if (!sky) sky = echarts.init(el);
    const sats = d.satellites.filter((s) => s.elevation_deg !== null && s.azimuth_deg !== null);
    const names = ORDER.filter((n) => sats.some((s) => s.constellation === n) || (d.tracks || []).some((t) => t.constellation === n));
    const series = [];
    for (const name of names) {
      const c = color(name);
      for (const t of (d.tracks || []).filter((t) => t.constellation === name && t.points.length > 1))
        series.push({ name, type: "line", coordinateSystem: "polar", data: track(t.points), showSymbol: false, silent: true,
          connectNulls: false, smooth: 0.5,  // the receiver reports whole degrees: smoothed, a track reads as a path
          lineStyle: { color: c, width: 2, opacity: 0.35 }, z: 1, animation: false });
      series.push({ name, type: "scatter", coordinateSystem: "polar", z: 3, animation: false,
        data: sats.filter((s) => s.constellation === name).map((s) => ({ value: [90 - s.elevation_deg, s.azimuth_deg], sat: s, name: label(s),
          symbolSize: s.used ? 23 : 20,
          itemStyle: s.used ? { color: c, borderColor: "#fff", borderWidth: 1.5 } : { color: "#fff", borderColor: c, borderWidth: 2 },
          label: { show: true, formatter: label(s), color: s.used ? "#fff" : c, fontSize: 9, fontWeight: 700 },
          ...(s.cn0_dbhz === null ? { itemStyle: { color: "#fff", borderColor: "#8c959f", borderWidth: 1.5, borderType: "dashed" },
            label: { show: true, formatter: label(s), color: "#8c959f", fontSize: 9 } } : {}) })) });
    }
    sky.setOption({
      animation: false,
      title: { text: "Sky", left: 8, top: 6, textStyle: { fontSize: 13, fontWeight: 600, color: "#1d232b" } },
      legend: { bottom: 4, data: names.map((n) => ({ name: n, icon: "circle", itemStyle: { color: color(n) } })), textStyle: { color: "#57606a" } },
      tooltip: { trigger: "item", formatter: tip },
      polar: { radius: "80%", center: ["50%", "50%"] },
      angleAxis: { type: "value", min: 0, max: 360, startAngle: 90, clockwise: true, interval: 30,
        axisLine: { lineStyle: { color: "#8c959f" } }, axisTick: { show: false },
        splitLine: { show: true, lineStyle: { color: "#e4e7eb" } },
        axisLabel: { color: "#57606a", formatter: (v) => ({ 0: "N", 90: "E", 180: "S", 270: "W" }[v] || v + "°") } },
      radiusAxis: { type: "value", min: 0, max: 90, interval: 15, axisLine: { show: false }, axisTick: { show: false },
        splitLine: { lineStyle: { color: "#e4e7eb" } }, axisLabel: { color: "#8c959f", fontSize: 10, formatter: (v) => v % 30 || v === 90 ? "" : (90 - v) + "°" } },
      series,
    }, { notMerge: true });
    const used = sats.filter((s) => s.used).length;
    const el2 = $("sky-summary");
    if (el2) el2.textContent = sats.length + " satellites with a position, " + used + " used; the tracks show where each has been over the last 30 minutes";
  }

  async function refresh() {
    const r = await fetch("/api/v1/satellites", { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (r.status === 401) { window.location = "/login"; return; }
    if (!r.ok) throw new Error("/api/v1/satellites: " + r.status);
    draw(await r.json());
  }
  if (document.body.dataset.page === "gnss") {
    const run = () => refresh().catch((e) => console.warn(e));
    run();
    setInterval(run, 5000);
    window.addEventListener("resize", () => sky && sky.resize());
  }
})();
