// Where the numbers come from. One interface, two sources:
//   live:   fetch() to the local depthlab server (every answer cached here too);
//   static: lookups into the data embedded in an exported page (no server at all).
// Plus latestOnly(): while a slider moves, at most one request is in flight and only
// the newest state is sent when it returns, so dragging never queues.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  DL.stats = { requests: 0, inFlight: 0, maxInFlight: 0 };

  // The static export's key of one switch setting (depthlab/web/export.py switch_key).
  const switchKey = (req) => req.residual + "|" + req.norm;

  function lru(limit) {
    const m = new Map();
    return {
      get(k) {
        if (!m.has(k)) return undefined;
        const v = m.get(k);
        m.delete(k);
        m.set(k, v);
        return v;
      },
      set(k, v) {
        m.set(k, v);
        if (m.size > limit) m.delete(m.keys().next().value);
      },
    };
  }

  // Writes carry this server's token, which only a page of its own origin can read from
  // /api/meta; it is forgotten on a 403 (the server was restarted) and read again.
  let token = null;
  function writeHeaders() {
    token = token || fetch("api/meta").then((r) => r.json())
      .then((m) => ({ [m.token_header]: m.write_token }))
      .catch((e) => { token = null; throw e; });
    return token;
  }

  // The one place the page talks to the server: every request goes through here. It names
  // the page's language, so a refusal's `error` comes back in it (depthlab/web/messages.py).
  async function request(method, path, body) {
    const opts = { method, headers: method === "GET" ? {} : { ...(await writeHeaders()) } };
    opts.headers["accept-language"] = DL.lang ? DL.lang() : "en";
    if (body !== undefined) {
      opts.headers["content-type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const r = await fetch(path, opts);
    const data = await r.json().catch(() => ({ error: path + ": HTTP " + r.status + ", not JSON" }));
    if (!r.ok) {
      if (r.status === 403) token = null;
      throw Object.assign(new Error(data.error || "HTTP " + r.status), { status: r.status });
    }
    return data;
  }

  function live() {
    const cache = lru(1000);
    async function call(method, path, body) {
      const key = method + " " + path + " " + JSON.stringify(body || null);
      const hit = cache.get(key);
      if (hit !== undefined) return hit;
      DL.stats.requests++;
      DL.stats.inFlight++;
      DL.stats.maxInFlight = Math.max(DL.stats.maxInFlight, DL.stats.inFlight);
      try {
        const data = await request(method, path, body);
        if (method === "POST" && !path.includes("/experiments/")) cache.set(key, data);
        return data;
      } finally {
        DL.stats.inFlight--;
      }
    }
    const get = (p) => call("GET", p);
    const post = (p, b) => call("POST", p, b);
    const fresh = (p) => request("GET", p);
    return {
      kind: "live",
      meta: () => get("api/meta"),
      locale: (lang) => get("api/locale/" + encodeURIComponent(lang)),
      snap: (st) => st,
      simulate: (req) => post("api/simulate", req),
      sweep: (req) => post("api/sweep", req),
      snapPaths: (n, a) => [n, a],
      paths: (req) => post("api/paths", req),
      norms: (req) => post("api/norms", req),
      growth: (req) => post("api/growth", req),
      composite: (req) => post("api/composite", req),
      frontier: () => fresh("api/frontier"),
      block: (preset, placement) =>
        get("api/block?preset=" + encodeURIComponent(preset) +
            (placement ? "&placement=" + encodeURIComponent(placement) : "")),
      anatomy: (name) => get("api/anatomy/" + encodeURIComponent(name)),
      anatomyConfigs: () => get("api/anatomy"),
      evolution: () => get("api/evolution"),
      experiments: () => fresh("api/experiments"),
      experiment: (name) => fresh("api/experiments/" + encodeURIComponent(name)),
      status: (name) => fresh("api/experiments/" + encodeURIComponent(name) + "/status"),
      run: (name, budget) => request("POST", "api/experiments/" + encodeURIComponent(name) + "/run", { budget }),
      realmodelRuns: () => fresh("api/realmodel/runs"),
      realmodelPrompts: (run) => get("api/realmodel/prompts?run=" + encodeURIComponent(run)),
      // not kept in the page: the server's disk cache answers fast, and its `cached` stays true
      realmodelProbe: (req) => request("POST", "api/realmodel/probe", req),
    };
  }

  function embedded(data) {
    const nearest = (xs, v) => xs.reduce((a, b) => (Math.abs(b - v) < Math.abs(a - v) ? b : a));
    const need = (v, what) => {
      if (v === undefined) return Promise.reject(new Error(what + " is not in this static copy"));
      return Promise.resolve(v);
    };
    const grid = data.grid;
    return {
      kind: "static",
      meta: () => Promise.resolve(data.meta),
      locale: (lang) => need((data.locales || {})[lang], "the " + lang + " text"),
      // The embedded grid holds only some N and g: move the state onto it.
      snap: (st) => Object.assign({}, st, { n: nearest(grid.n, st.n), g: nearest(grid.g, st.g) }),
      // The rows as /api/simulate sends them; the request holds the fields the page reads.
      simulate(req) {
        const ng = req.n + "|" + req.g.toFixed(2);
        const naive = data.naive[req.mode][ng];
        const improved = data.improved[req.mode][ng + "|" + switchKey(req)];
        if (!naive || !improved) return need(undefined, "N=" + req.n + ", g=" + req.g + ", " + switchKey(req));
        const request = { depth: req.n, gain: req.g, residual: req.residual, norm: req.norm };
        return Promise.resolve({ kind: req.mode, request, naive, improved });
      },
      sweep: (req) => need(data.sweep[req.n + "|" + switchKey(req)], "the sweep at N=" + req.n),
      // the formula's exact arithmetic on the copy's grid of N and a (export.py PATHS_GRID)
      snapPaths: (n, a) => [nearest(data.paths_grid.n, n), nearest(data.paths_grid.a, a)],
      paths: (req) => need(data.paths[req.n + "|" + req.a], "N = " + req.n + ", a = " + req.a),
      norms: (req) => Promise.resolve(DL.arith.norms(req.x, req.eps)),
      growth: () => need(data.growth, "the growth probe"),
      composite: () => need(data.composite, "the composite gain"),
      frontier: () => need(data.frontier, "the residual-frontier data"),
      block: (preset, placement) => need((data.blocks[preset] || {})[placement || ""], "this block"),
      anatomy: (name) => need((data.anatomy || {})[name], "the anatomy of " + name),
      anatomyConfigs: () => need(data.anatomy_configs, "the anatomy list"),
      evolution: () => need(data.evolution, "the evolution table"),
      experiments: () => Promise.resolve(data.experiments || []),
      experiment: (name) => need((data.exports || {})[name], "experiment " + name),
      status: () => Promise.reject(new Error("static copy")),
      run: () => Promise.reject(new Error("static copy")),
      // the shipped prompts on one run, keyed as depthlab/web/realmodel.py static_key
      realmodelRuns: () => Promise.resolve((data.realmodel || {}).runs || []),
      // a shipped prompt is readable here when this copy holds its result on the run
      realmodelPrompts: (run) => need(data.realmodel, "the real-model prompts").then((d) => Object.assign({}, d, {
        prompts: d.prompts.map((p) => Object.assign({}, p, {
          readable: JSON.stringify([run, p.text, p.target]) in (d.results || {}) })) })),
      realmodelProbe: (req) => need(((data.realmodel || {}).results || {})[JSON.stringify([req.run, req.prompt, req.target])],
                                    "this prompt on this run"),
    };
  }

  // The norms calculator of the static copy (a typed vector cannot be precomputed): the
  // float64 arithmetic of depthlab.probes.exact.compare_norms, scaled outputs included.
  // tests/test_page_arith_parity.py runs both on the same vectors in Chromium. (The exact
  // arithmetic, paths and counts, is never computed here: a static copy embeds it.)
  const SCALE_FACTORS = [1000, 0.001];
  function normed(x, eps) {
    const n = x.length;
    const mean = x.reduce((s, v) => s + v, 0) / n;
    const centred = x.map((v) => v - mean);
    const variance = centred.reduce((s, v) => s + v * v, 0) / n;
    const meanSquare = x.reduce((s, v) => s + v * v, 0) / n;
    const inv = 1 / Math.sqrt(variance + eps);
    const invr = 1 / Math.sqrt(meanSquare + eps);
    return { mean, centred, variance, meanSquare, layernorm: centred.map((v) => v * inv), rmsnorm: x.map((v) => v * invr) };
  }
  const change = (a, b) => {
    const d = Math.max(...a.map((v, i) => Math.abs(v - b[i])));
    return isFinite(d) ? d : null;
  };
  DL.arith = {
    norms(x, eps) {
      const r = normed(x, eps);
      const scaled = SCALE_FACTORS.map((factor) => {
        const big = x.map((v) => factor * v);
        if (!big.every(isFinite) || !isFinite(big.reduce((s, v) => s + v * v, 0))) {
          return { factor, layernorm_change: null, rmsnorm_change: null };
        }
        const o = normed(big, eps);
        return { factor, layernorm_change: change(o.layernorm, r.layernorm), rmsnorm_change: change(o.rmsnorm, r.rmsnorm) };
      });
      return { kind: "norms", x, eps, mean: r.mean, variance: r.variance, mean_square: r.meanSquare,
               rms: Math.sqrt(r.meanSquare), centred: r.centred, layernorm: r.layernorm, rmsnorm: r.rmsnorm, scaled };
    },
  };

  // Numbers as typed on any keyboard ("３，４", "－０．５", "3、4"): the rules of
  // depthlab/numtext.py, which the server uses (tests/test_numtext.py runs both).
  const MINUS = /[\u2212\u2012\u2013]/g;
  const SEPARATORS = /[\t\n\v\f\r ,;、\u0085\u2028\u2029]+/;
  const NUMBER = /^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/;
  // only the width forms (full-width, small, wide spaces): NFKC of all would read 3² as 32
  const WIDTH_FORMS = /[\u00a0\u2000-\u200a\u202f\u205f\u3000\ufe50-\ufe6b\uff01-\uff5e]/g;
  DL.normalizeNumbers = (text) => text.replace(WIDTH_FORMS, (c) => c.normalize("NFKC")).replace(MINUS, "-");
  // {x: the numbers, bad: null} or {x: null, bad: the first piece that is not a number}
  DL.parseNumbers = (text) => {
    const pieces = DL.normalizeNumbers(text).split(SEPARATORS).filter(Boolean);
    const bad = pieces.find((p) => !NUMBER.test(p));
    return bad === undefined ? { x: pieces.map(Number), bad: null } : { x: null, bad };
  };

  DL.latestOnly = function (fn, onResult, onError) {
    let busy = false;
    let pending = null;
    async function pump(arg) {
      busy = true;
      try {
        onResult(await fn(arg), arg);
      } catch (e) {
        onError(e, arg);
      }
      busy = false;
      if (pending !== null) {
        const next = pending;
        pending = null;
        pump(next);
      }
    }
    return (arg) => {
      if (busy) pending = arg; // replace whatever was waiting: only the newest state counts
      else pump(arg);
    };
  };

  DL.makeSource = function () {
    const el = document.getElementById("depthlab-data");
    return el ? embedded(JSON.parse(el.textContent)) : live();
  };
})();
