/* The configuration page: one section at a time, a search across all of them, and each setting saved on its own
   (PUT /api/v1/config/<name>, the REST API's own check and audit) with the answer shown beside it: no reload, the
   open section and the place on the page kept.  Without JavaScript the page still works: every section shows, and
   each Save posts its form. */
"use strict";
(function () {
  const root = document.getElementById("config");
  if (!root) return;
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const admin = root.dataset.admin === "1";
  const search = document.getElementById("config-search");
  const sections = [...root.querySelectorAll(".config-section")];
  const navLinks = [...root.querySelectorAll("#sections-nav a")];
  const rows = [...root.querySelectorAll("tr.setting")];
  const byName = new Map(rows.map((tr) => [tr.dataset.name, tr]));
  const haystacks = new Map(rows.map((tr) =>  // what the search looks through: the name and the description
    [tr, (tr.dataset.name + " " + tr.querySelector(".help").textContent).toLowerCase()]));
  let current = sections.length ? sections[0].dataset.section : "";
  root.classList.add("js");

  const sectionOf = (tr) => tr.closest(".config-section");
  const navOf = (key) => navLinks.find((a) => a.dataset.section === key);
  const field = (tr) => tr.querySelector(".field input:not([type=hidden]), .field select");
  const unitOf = (tr) => { const u = tr.querySelector(".unit"); return u ? " " + u.textContent : ""; };

  function textOf(v) {  // a value as the page shows it: lists comma-separated, booleans true/false
    if (Array.isArray(v)) return v.join(", ");
    return v === null || v === undefined ? "" : String(v);
  }
  function fieldText(f) { return f.type === "checkbox" ? String(f.checked) : f.value; }
  function isDirty(tr) {
    const f = field(tr);
    if (!f || f.disabled) return false;
    return f.type === "password" ? f.value !== "" : fieldText(f) !== tr.dataset.saved;
  }
  function say(tr, kind, message) {
    const out = tr.querySelector(".result");
    if (!out) return;
    out.className = "result" + (kind ? " " + kind : "");
    out.textContent = message;
  }

  // --- sections and search -------------------------------------------------------------------------------------
  function showSection(key) {
    current = key;
    for (const s of sections) s.hidden = s.dataset.section !== key;
    for (const a of navLinks) a.classList.toggle("on", a.dataset.section === key);
    history.replaceState(null, "", "#section-" + key);
  }
  function filter() {
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    let total = 0;
    for (const s of sections) {
      let n = 0;
      for (const tr of s.querySelectorAll("tr.setting")) {
        const hit = words.every((w) => haystacks.get(tr).includes(w));
        tr.hidden = !hit;
        n += hit ? 1 : 0;
      }
      total += n;
      const a = navOf(s.dataset.section), count = a.querySelector(".sec-count");
      count.textContent = words.length ? n : count.dataset.total;
      a.classList.toggle("dim", words.length > 0 && n === 0);
      if (words.length) s.hidden = n === 0;
    }
    root.classList.toggle("searching", words.length > 0);
    document.getElementById("search-count").textContent =
      words.length ? total + (total === 1 ? " setting matches" : " settings match") : "";
    document.getElementById("nothing-found").hidden = !words.length || total > 0;
    if (words.length) for (const a of navLinks) a.classList.remove("on");
    else showSection(current);
  }
  function clearSearch() { if (search.value) { search.value = ""; filter(); } }
  function goTo(tr) {
    clearSearch();
    showSection(sectionOf(tr).dataset.section);
    tr.scrollIntoView({ block: "center" });
    tr.classList.remove("flash-row");
    void tr.offsetWidth;  // restart the highlight
    tr.classList.add("flash-row");
  }
  function fromHash() {
    const h = decodeURIComponent(location.hash.slice(1));
    const el = h ? document.getElementById(h) : null;
    if (el && el.matches("tr.setting")) goTo(el);
    else if (el && el.matches(".config-section")) showSection(el.dataset.section);
    else showSection(current);
  }

  // --- saving ----------------------------------------------------------------------------------------------------
  function numberProblem(f, tr) {
    const v = f.validity, unit = unitOf(tr);
    if (v.valueMissing || v.badInput) return "enter a number";
    if (v.rangeUnderflow) return "too small: at least " + f.min + unit;
    if (v.rangeOverflow) return "too large: at most " + f.max + unit;
    if (v.stepMismatch) return "a whole number is needed";
    return f.validationMessage;
  }
  function keepPlace(tr, top) {  // the saved row stays where it was on the screen, whatever changed above it
    const moved = tr.getBoundingClientRect().top - top;
    if (Math.abs(moved) >= 1) window.scrollBy(0, moved);
  }
  async function save(tr) {
    const f = field(tr), name = tr.dataset.name, top = tr.getBoundingClientRect().top;
    if (f.type === "number" && !f.checkValidity()) {
      tr.classList.add("refused");
      say(tr, "bad", "Not saved: " + numberProblem(f, tr) + ".");
      return false;
    }
    const value = f.type === "checkbox" ? f.checked : f.value;
    say(tr, "busy", "Saving…");
    let r, body;
    try {
      r = await fetch("/api/v1/config/" + encodeURIComponent(name), { method: "PUT", credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf },
        body: JSON.stringify({ value }) });
      body = await r.json().catch(() => ({}));
    } catch (e) {
      say(tr, "bad", "Not saved: the appliance did not answer (" + e.message + ").");
      return false;
    }
    if (!r.ok) {
      tr.classList.add("refused");
      say(tr, "bad", "Not saved: " + (body.error || "HTTP " + r.status));
      keepPlace(tr, top);
      return false;
    }
    tr.classList.remove("refused");
    tr.dataset.saved = f.type === "password" ? "" : textOf(body.value);
    if (f.type === "password") f.value = "";
    else if (f.type === "checkbox") f.checked = body.value === true;
    else f.value = tr.dataset.saved;
    const row = (await refresh())[name] || {};
    say(tr, "ok", body.applied ? "✓ Saved and applied."
      : row.pending_restart ? "✓ Saved; takes effect after a restart." : "✓ Saved; the appliance already runs with it.");
    markDirty(tr);
    keepPlace(tr, top);
    return true;
  }
  async function saveSection(section) {
    for (const tr of section.querySelectorAll("tr.setting")) if (isDirty(tr)) await save(tr);
  }
  function markDirty(tr) {
    tr.classList.toggle("dirty", isDirty(tr));
    if (tr.classList.contains("refused") && !isDirty(tr)) { tr.classList.remove("refused"); say(tr, "", ""); }
    const section = sectionOf(tr), button = section.querySelector(".save-section");
    if (!button) return;
    const n = [...section.querySelectorAll("tr.setting")].filter(isDirty).length;
    button.hidden = n === 0;
    button.textContent = n === 1 ? "Save 1 change" : "Save " + n + " changes";
  }

  // --- what the appliance says now: changed-from-default markers, section marks, the restart list ------------------
  async function refresh() {
    const r = await fetch("/api/v1/config", { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!r.ok) return {};
    const settings = {};
    for (const s of (await r.json()).settings) settings[s.name] = s;
    const pending = [];
    for (const [name, tr] of byName) {
      const s = settings[name];
      if (!s) continue;
      tr.classList.toggle("changed", s.changed);
      tr.classList.toggle("waiting", s.pending_restart);
      const running = tr.querySelector(".running");
      running.hidden = !s.pending_restart;
      running.querySelector("code").textContent = textOf(s.running) || "empty";
      if (s.pending_restart) pending.push(s);
    }
    for (const section of sections) {
      const changed = section.querySelectorAll("tr.setting.changed").length;
      const mark = navOf(section.dataset.section).querySelector(".sec-changed");
      mark.hidden = changed === 0;
      mark.title = changed + " changed from default";
      section.querySelector(".sec-changed-text").textContent = changed ? ", " + changed + " changed from default" : "";
    }
    restartList(pending);
    return settings;
  }
  function restartList(pending) {
    const box = document.getElementById("restart-list"), list = box.querySelector("ul");
    list.replaceChildren(...pending.map((s) => {
      const li = document.createElement("li"), a = document.createElement("a"), name = document.createElement("code");
      li.dataset.name = s.name;
      name.textContent = s.name;
      a.href = "#" + byName.get(s.name).id;
      a.appendChild(name);
      const code = (text) => { const c = document.createElement("code"); c.textContent = text || "empty"; return c; };
      li.append(a, ": running ", code(textOf(s.running)), " → saved ", code(textOf(s.value)));
      return li;
    }));
    box.hidden = pending.length === 0;
  }

  // --- wiring ----------------------------------------------------------------------------------------------------
  for (const a of navLinks) {
    a.querySelector(".sec-count").dataset.total = a.querySelector(".sec-count").textContent;
    a.addEventListener("click", (e) => {
      e.preventDefault();
      clearSearch();
      showSection(a.dataset.section);
      window.scrollTo(0, 0);
    });
  }
  document.getElementById("restart-list").addEventListener("click", (e) => {
    const a = e.target.closest("a");
    if (!a) return;
    e.preventDefault();
    goTo(document.getElementById(a.getAttribute("href").slice(1)));
  });
  search.addEventListener("input", filter);
  search.addEventListener("keydown", (e) => { if (e.key === "Escape") clearSearch(); });
  document.addEventListener("keydown", (e) => {
    if (e.key === "/" && !e.target.closest("input, select, textarea")) { e.preventDefault(); search.focus(); }
  });
  if (admin) {
    for (const tr of rows) {
      const form = tr.querySelector("form.setting-form");
      if (!form) continue;
      form.noValidate = true;  // the field's own check runs in save(), its answer beside the setting
      form.addEventListener("submit", (e) => { e.preventDefault(); save(tr); });
      form.addEventListener("input", () => markDirty(tr));
      form.addEventListener("change", () => {
        const f = field(tr), text = tr.querySelector(".check-text");
        if (text) text.textContent = String(f.checked);
        markDirty(tr);
      });
      const reset = tr.querySelector(".use-default");
      if (reset) reset.addEventListener("click", () => {
        const f = field(tr), d = tr.dataset.default;
        if (f.type === "checkbox") f.checked = d === "true"; else f.value = d;
        f.dispatchEvent(new Event("change", { bubbles: true }));
        f.focus();
      });
    }
    for (const section of sections) {
      const button = section.querySelector(".save-section");
      if (button) button.addEventListener("click", () => saveSection(section));
    }
  }
  fromHash();
  window.addEventListener("hashchange", fromHash);
})();
