// The state of every control lives in the URL hash (#n=32&g=1.00&...), so a view can
// be shared by copying the address; a query string (?lang=zh) is read too. Values are parsed and clamped here, once.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});

  const clamp = (v, lo, hi) => Math.min(hi, Math.max(lo, v));
  const num = (s, d) => (s == null || s === "" || !isFinite(+s) ? d : +s);
  const bool = (s, d) => (s == null ? d : s === "1");

  // name -> [parse(raw string or null), serialize(value)]
  const FIELDS = {
    lang: [(s) => (s === "zh" || s === "en" ? s : DL.defaultLang()), String],
    mode: [(s) => (s === "collapse" ? "collapse" : "gradient"), String],
    n: [(s) => clamp(Math.round(num(s, 32)), 1, 64), String],
    g: [(s) => clamp(Math.round(num(s, 1) * 20) / 20, 0.5, 2), (v) => v.toFixed(2)],
    res: [(s) => bool(s, true), (v) => (v ? "1" : "0")],
    pre: [(s) => bool(s, false), (v) => (v ? "1" : "0")],
    wb: [(s) => bool(s, false), (v) => (v ? "1" : "0")],
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

  // The hash first, then the query string (?lang=zh works like #lang=zh).
  function read() {
    const q = new URLSearchParams(location.hash.replace(/^#/, ""));
    const search = new URLSearchParams(location.search);
    const st = {};
    for (const [k, [parse]] of Object.entries(FIELDS)) st[k] = parse(q.has(k) ? q.get(k) : search.get(k));
    return st;
  }

  let state = read();
  const listeners = [];

  DL.state = {
    get: () => state,
    // Merge a patch, write the URL (no history entry per slider step), notify.
    set(patch) {
      state = Object.assign({}, state, patch);
      for (const k of Object.keys(FIELDS)) state[k] = FIELDS[k][0](FIELDS[k][1](state[k]));
      const q = new URLSearchParams();
      for (const [k, [, ser]] of Object.entries(FIELDS)) q.set(k, ser(state[k]));
      history.replaceState(null, "", "#" + q.toString());
      listeners.forEach((fn) => fn(state, patch));
    },
    on: (fn) => listeners.push(fn),
  };

  window.addEventListener("hashchange", () => {
    state = read();
    listeners.forEach((fn) => fn(state, state));
  });
})();
