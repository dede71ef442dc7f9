// Boot: pick the data source (live server or embedded data), load the language's text
// table from it, build every figure, wire the simulator's controls to the URL state, and route each state
// change to the figures that depend on it.
(async function () {
  "use strict";
  const DL = window.DL;
  const $ = (id) => document.getElementById(id);
  const source = DL.makeSource();
  DL.source = source;
  DL.errors = [];
  // Every error is shown on the page (a banner under the header), never only logged.
  const showError = (e) => {
    const msg = String((e && e.message) || e);
    DL.errors.push(msg);
    const box = $("page-errors");
    box.textContent = DL.t("err.with", { what: DL.t("err"), message: DL.errors.slice(-3).join(" · ") });
    box.style.display = "block";
    if (window.console) console.warn("depthlab:", msg); // eslint-disable-line no-console
  };
  DL.showError = showError;
  window.addEventListener("error", (e) => showError(e.error || e.message));
  window.addEventListener("unhandledrejection", (e) => showError(e.reason));

  let st = DL.state.get();
  try {
    await DL.useLang(st.lang, source);
  } catch (e) {
    showError(e);
  }
  langButton();

  // The page's boxes in the lesson's order and the state keys each redraws on: the registry's
  // (depthlab/web/sections.py PAGE, with the sections' own modules), from /api/meta.
  let order = [];
  try {
    order = (await source.meta()).page || [];
  } catch (e) {
    showError(e);
  }
  const sim = DL.figures.simulator(source, showError);
  // Built one per task after the simulator (below): one long start-up task would freeze the page.
  const figures = {};
  const LATER = order.map((f) => f.name).filter((name) => name !== "simulator" && DL.figures[name]);
  // Which figures a changed state key concerns.
  const ROUTES = {};
  for (const f of order) {
    for (const key of f.state) (ROUTES[key] = ROUTES[key] || []).push(f.name === "simulator" ? "sim" : f.name);
  }
  // Each box in the registry's place (a section's module appends its box to <main> when built).
  function place() {
    const main = document.querySelector("main");
    let prev = $("page-errors");
    for (const f of order) {
      const box = document.getElementById(f.name);
      if (!box || box.parentNode !== main) continue;
      if (box.previousElementSibling !== prev) prev.after(box);
      prev = box;
    }
  }
  place();

  // The document's title and the language button in the page's language: the button shows
  // the other language's name (marked as that language) and its name says what it does.
  function langButton() {
    const b = $("lang");
    const name = document.createElement("span");
    name.lang = DL.lang() === "zh" ? "en" : "zh-CN";
    name.textContent = DL.t("lang.switch");
    b.replaceChildren(name);
    b.setAttribute("aria-label", DL.t("lang.label"));
    b.title = DL.t("lang.label");
    document.title = DL.t("doc.title");
  }

  function controls(s) {
    $("n").value = s.n;
    $("g").value = s.g;
    document.querySelectorAll(".tabs [data-mode]").forEach((b) => {
      b.setAttribute("aria-selected", String(b.dataset.mode === s.mode));
      b.classList.toggle("on", b.dataset.mode === s.mode);
    });
  }

  function route(s, patch) {
    if (patch.lang !== undefined && patch.lang !== DL.lang()) {
      DL.useLang(s.lang, source).then(() => {
        langButton();
        sim.relabel();
        Object.values(figures).forEach((f) => f.relabel());
        footer();
      }).catch(showError);
    }
    const touched = new Set(Object.keys(patch).flatMap((k) => ROUTES[k] || []));
    if (touched.has("sim")) {
      const snapped = source.snap("simulate", s);
      if (snapped.n !== s.n || snapped.g !== s.g) return DL.state.set({ n: snapped.n, g: snapped.g });
      controls(s);
      sim.update(s);
    }
    for (const [name, f] of Object.entries(figures)) if (touched.has(name)) f.update(s);
  }
  DL.state.on(route);

  // Slider input: note the time (the latency bench reads DL.perf), then set the state.
  const input = (patch) => {
    DL.perf.t0 = performance.now();
    DL.state.set(patch);
  };
  $("n").addEventListener("input", (e) => input({ n: +e.target.value }));
  $("g").addEventListener("input", (e) => input({ g: +e.target.value }));
  sim.onSwitch(input); // the residual, norm and x0-mixing switches, built by simulator.js from /api/meta
  document.querySelectorAll(".tabs [data-mode]").forEach((b) =>
    b.addEventListener("click", () => input({ mode: b.dataset.mode })));
  $("lang").addEventListener("click", () => DL.state.set({ lang: DL.lang() === "zh" ? "en" : "zh" }));

  function footer() {
    source.meta().then((m) => {
      const f = $("foot");
      f.textContent = "";
      const what = DL.t(m.mode === "static" ? "foot.static" : "foot.live");
      f.append(what + " " + m.version + (m.exported_at ? " · " + DL.t("foot.at") + " " + m.exported_at : "") +
        (m.mode === "static" ? " · N ∈ {" + m.grid.n.join(", ") + "}, " + DL.t("foot.grid") + " " + m.grid.g_step : ""));
      if (m.mode === "static") $("sim-note").textContent = DL.t("sim.note") + " " + DL.t("sim.static") + ".";
    }).catch(showError);
  }
  footer();

  // First paint: every figure from the URL state.
  st = DL.state.get();
  DL.state.set({}); // normalises the URL, then routes nothing (empty patch)
  route(st, st);
  DL.bootAt = performance.now(); // the end of the start-up task: from here on the page is interactive
  (async () => {
    for (const name of LATER) {
      await new Promise((r) => setTimeout(r, 0));
      figures[name] = DL.figures[name](source, showError);
      place();
      figures[name].update(DL.state.get());
    }
    DL.ready = true;
    DL.readyAt = Math.round(performance.now());
  })();
})();
