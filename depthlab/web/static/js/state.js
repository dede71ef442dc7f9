// The state of every control lives in the URL hash (#n=32&g=1.00&...), so a view can
// be shared by copying the address; a query string (?lang=zh) is read too. Values are parsed and clamped here, once.
// The simulator's bounds and switch values come from /api/meta (`simulator`, handed over by
// DL.state.bound); until they arrive its fields are only checked for shape.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});

  const clamp = (v, lo, hi) => Math.min(hi, Math.max(lo, v));
  const num = (s, d) => (s == null || s === "" || !isFinite(+s) ? d : +s);
  const slug = (s) => (s && /^[a-z0-9_]{1,40}$/.test(s) ? s : null);
  let sim = null; // /api/meta's `simulator`: depth, gain, gain_step, residuals, norms
  const depth = (s) => {
    const v = Math.round(num(s, 32));
    return sim ? clamp(v, sim.depth[0], sim.depth[1]) : Math.max(1, v);
  };
  const gain = (s) => {
    const v = num(s, 1);
    if (!sim) return v > 0 ? v : 1;
    const step = sim.gain_step;
    return clamp(+(Math.round(v / step) * step).toFixed(10), sim.gain[0], sim.gain[1]);
  };
  // A switch value: one of meta's choices (else the default), any name-like string before.
  const choice = (list, d) => (s) => {
    const v = slug(s);
    if (!sim) return v || d;
    return sim[list].includes(v) ? v : sim[list].includes(d) ? d : sim[list][0];
  };

  // name -> [parse(raw string or null), serialize(value)]
  const FIELDS = {
    lang: [(s) => (s === "zh" || s === "en" ? s : DL.defaultLang()), String],
    mode: [(s) => (s === "collapse" ? "collapse" : "gradient"), String],
    n: [depth, String],
    g: [gain, (v) => v.toFixed(2)],
    // the improved stack, in the model's vocabulary (depthlab.probes.simulator)
    residual: [choice("residuals", "plain"), String],
    norm: [choice("norms", "none"), String],
    x0: [(s) => s === "1", (v) => (v ? "1" : "0")], // model.x0_mix: x ← λᵢ·x + μᵢ·x₀ before every layer
    mixer: [choice("mixers", "attention"), String], // collapse mode's token mixer (both rows)
    flow: [(s) => s || "course", String],
    stage: [(s) => s || "", String],
    preset: [(s) => (s && /^[a-z0-9_]{1,40}$/.test(s) ? s : "course"), String],
    // the placements and the formula's bounds are /api/meta's: the figures check them
    place: [(s) => (s && /^[a-z_]{1,40}$/.test(s) ? s : ""), String],
    pn: [(s) => Math.round(num(s, 2)), String],
    pa: [(s) => num(s, 0.5), String],
    vec: [(s) => s || "3, 4", String],
    // the real-model section: run, shipped prompt id ("" = the typed text, or with none typed
    // the first shipped prompt in the page's language), typed text, lens target
    rrun: [(s) => s || "", String],
    rp: [(s) => (s && /^[a-z0-9-]{1,40}$/.test(s) ? s : ""), String],
    rtext: [(s) => (s || "").slice(0, 400), String],
    rtgt: [(s) => (s || "").slice(0, 40), String],
  };

  // Links made before the switches spoke the model's vocabulary: res=1 (x + F(x)), pre=1
  // (pre-RMSNorm), wb=1 (write x 1/sqrt(N), with res=1: residual=scaled; without a skip path
  // the model has no such write, so res=0 reads as residual=none whatever wb says).
  function legacy(q) {
    if (!q.has("residual") && q.has("res")) {
      q.set("residual", q.get("res") !== "1" ? "none" : q.get("wb") === "1" ? "scaled" : "plain");
    }
    if (!q.has("norm") && q.has("pre")) q.set("norm", q.get("pre") === "1" ? "rmsnorm" : "none");
    return q;
  }

  // The hash first, then the query string (?lang=zh works like #lang=zh).
  function read() {
    const q = legacy(new URLSearchParams(location.hash.replace(/^#/, "")));
    const search = legacy(new URLSearchParams(location.search));
    const st = {};
    for (const [k, [parse]] of Object.entries(FIELDS)) st[k] = parse(q.has(k) ? q.get(k) : search.get(k));
    return st;
  }

  let state = read();
  const listeners = [];

  function write() {
    const q = new URLSearchParams();
    for (const [k, [, ser]] of Object.entries(FIELDS)) q.set(k, ser(state[k]));
    history.replaceState(null, "", "#" + q.toString());
  }

  DL.state = {
    get: () => state,
    // Merge a patch, write the URL (no history entry per slider step), notify.
    set(patch) {
      state = Object.assign({}, state, patch);
      for (const k of Object.keys(FIELDS)) state[k] = FIELDS[k][0](FIELDS[k][1](state[k]));
      write();
      listeners.forEach((fn) => fn(state, patch));
    },
    // The simulator's bounds and choices from /api/meta: re-read the state within them and
    // notify the keys that moved.
    bound(spec) {
      sim = spec;
      const before = state;
      state = Object.assign({}, state);
      for (const k of Object.keys(FIELDS)) state[k] = FIELDS[k][0](FIELDS[k][1](state[k]));
      const moved = {};
      for (const k of Object.keys(FIELDS)) if (state[k] !== before[k]) moved[k] = state[k];
      write();
      if (Object.keys(moved).length) listeners.forEach((fn) => fn(state, moved));
    },
    on: (fn) => listeners.push(fn),
  };

  window.addEventListener("hashchange", () => {
    state = read();
    write(); // an old link's keys (res/pre/wb) become the switches' names in the address
    listeners.forEach((fn) => fn(state, state));
  });
})();
