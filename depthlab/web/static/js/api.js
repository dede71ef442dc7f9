// Where the numbers come from. One interface, two sources:
//   live:   fetch() to the local depthlab server (every answer cached here too);
//   static: lookups into the data embedded in an exported page (no server at all).
// A page section with server data is read through one call, section(name, req): live, a
// request to the path /api/meta lists for it (depthlab/web/sections.py); static, the
// answer stored under sections[name][DL.sectionKey(req)] by depthlab/web/export.py.
// Plus latestOnly(): while a slider moves, at most one request is in flight and only
// the newest state is sent when it returns, so dragging never queues.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  DL.stats = { requests: 0 };

  // A request's key in a static copy (depthlab/web/sections.py request_key): the JSON of its
  // fields sorted by name, no spaces, numbers as String(number) writes them.
  function canonical(v) {
    if (v === null || typeof v !== "object") return typeof v === "number" ? String(v) : JSON.stringify(v);
    if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
    return "{" + Object.keys(v).sort().filter((k) => v[k] !== undefined)
      .map((k) => JSON.stringify(k) + ":" + canonical(v[k])).join(",") + "}";
  }
  // with the section's defaults (from meta) filled in, as the server fills them
  DL.sectionKey = (req, defaults) => canonical(Object.assign({}, defaults || {}, req));

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

  // /api/meta is fixed for the life of a server: it is read once per page load and every
  // module shares the answer. It carries the server's write token, which only a page of its
  // own origin can read; on a 403 (the server was restarted) it is forgotten and read again.
  let meta = null;
  function readMeta() {
    meta = meta || fetch("api/meta").then((r) => {
      if (!r.ok) throw new Error("api/meta: HTTP " + r.status);
      return r.json();
    }).catch((e) => { meta = null; throw e; });
    return meta;
  }
  const writeHeaders = () => readMeta().then((m) => ({ [m.token_header]: m.write_token }));

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
      if (r.status === 403) meta = null;
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
      const data = await request(method, path, body);
      if (method === "POST" && !path.includes("/experiments/")) cache.set(key, data);
      return data;
    }
    const get = (p) => call("GET", p);
    const post = (p, b) => call("POST", p, b);
    const fresh = (p) => request("GET", p);
    let specs = null; // /api/meta's sections by name
    const sections = () => {
      specs = specs || readMeta().then((m) => Object.fromEntries(m.sections.map((s) => [s.name, s])))
        .catch((e) => { specs = null; throw e; });
      return specs;
    };
    // a GET's fields fill the {name}s of its path, the rest is the query string
    function url(path, req) {
      const q = new URLSearchParams();
      const p = path.replace(/\{(\w+)\}/g, (_, k) => encodeURIComponent(req[k]));
      for (const [k, v] of Object.entries(req)) {
        if (v !== null && v !== undefined && !path.includes("{" + k + "}")) q.set(k, String(v));
      }
      const qs = q.toString();
      return p.replace(/^\//, "") + (qs ? "?" + qs : "");
    }
    return {
      kind: "live",
      meta: readMeta,
      locale: (lang) => get("api/locale/" + encodeURIComponent(lang)),
      snap: (name, req) => req,
      async section(name, req) {
        const s = (await sections())[name];
        if (!s) throw new Error("no page section " + name);
        return s.method === "GET" ? get(url(s.path, req || {})) : post(s.path.replace(/^\//, ""), req || {});
      },
      frontier: () => fresh("api/frontier"),
      speedrun: () => fresh("api/speedrun"),
      anatomyConfigs: () => get("api/anatomy"),
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
    const specs = Object.fromEntries(((data.meta || {}).sections || []).map((s) => [s.name, s]));
    const shared = data.shared || [];
    // an answer's values that the export stored once for many answers (export.py share)
    const unshare = (a) => (a && typeof a === "object" && !Array.isArray(a)
      ? Object.fromEntries(Object.entries(a).map(([k, v]) =>
        [k, v && typeof v === "object" && "$shared" in v ? shared[v.$shared] : v]))
      : a);
    // sections a static copy computes in the page itself (a typed vector cannot be precomputed)
    const here = { norms: (req) => DL.arith.norms(req.x, req.eps) };
    return {
      kind: "static",
      meta: () => Promise.resolve(data.meta),
      locale: (lang) => need((data.locales || {})[lang], "the " + lang + " text"),
      // A copy holds each section's answers on a grid (meta's sections[].grid: the values of
      // each numeric field): move a request's numbers onto it.
      snap(name, req) {
        const grid = (specs[name] || {}).grid || {};
        const out = Object.assign({}, req);
        for (const [k, xs] of Object.entries(grid)) if (typeof out[k] === "number" && xs.length) out[k] = nearest(xs, out[k]);
        return out;
      },
      section(name, req) {
        if (here[name]) return Promise.resolve(here[name](req));
        const key = DL.sectionKey(req || {}, (specs[name] || {}).defaults);
        return need(unshare(((data.sections || {})[name] || {})[key]), name + " " + key);
      },
      frontier: () => need(data.frontier, "the residual-frontier data"),
      speedrun: () => need(data.speedrun, "the speedrun data"),
      anatomyConfigs: () => need(data.anatomy_configs, "the anatomy list"),
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
  // arithmetic of depthlab.probes.exact.compare_norms step for step, scaled outputs
  // included: mean, centred values, variance and mean square as exact rationals of BigInts
  // (every double is m * 2^e), each rounded once to a double (ratToDouble, as Python's
  // float(Fraction)), the outputs over double square roots (sqrtRational, as Python's
  // sqrt_rational). tests/test_page_arith_parity.py runs both on the same vectors in
  // Chromium. (The exact arithmetic, paths and counts, is never computed here: a static
  // copy embeds it.)
  const SCALE_FACTORS = [1000, 0.001];
  const bits = new DataView(new ArrayBuffer(8));
  const bitLength = (a) => (a === 0n ? 0 : a.toString(2).length);
  // a finite double as the rational [numerator, denominator], the denominator a power of 2
  function exactOf(v) {
    bits.setFloat64(0, v);
    const hi = bits.getUint32(0), lo = bits.getUint32(4), ex = (hi >>> 20) & 0x7ff;
    let m = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
    if (ex !== 0) m |= 1n << 52n;
    const e = (ex === 0 ? 1 : ex) - 1075;  // v = m * 2^e
    const num = hi >>> 31 ? -m : m;
    return e >= 0 ? [num << BigInt(e), 1n] : [num, 1n << BigInt(-e)];
  }
  const add = ([a, b], [c, d]) => [a * d + c * b, b * d];
  const mul = ([a, b], [c, d]) => [a * c, b * d];
  const over = ([a, b], n) => [a, b * BigInt(n)];
  const sum = (qs) => qs.reduce(add, [0n, 1n]);
  // num / den (den > 0) rounded to the nearest double, ties to even, subnormals included
  function ratToDouble([num, den]) {
    if (num === 0n) return 0;
    const neg = num < 0n, a = neg ? -num : num;
    let e = bitLength(a) - bitLength(den);  // then 2^e <= a / den < 2^(e+1)
    if ((e >= 0 ? a : a << BigInt(-e)) < (e >= 0 ? den << BigInt(e) : den)) e -= 1;
    if (e > 1023) return neg ? -Infinity : Infinity;
    const lsb = Math.max(e - 52, -1074);  // the last bit a double keeps there is 2^lsb
    const p = lsb >= 0 ? a : a << BigInt(-lsb), q = lsb >= 0 ? den << BigInt(lsb) : den;
    let m = p / q;
    const twice = 2n * (p - m * q);
    if (twice > q || (twice === q && (m & 1n))) m += 1n;
    const v = Number(m) * 2 ** lsb;  // exact: m has at most 53 bits, 2^lsb is a double
    return neg ? -v : v;
  }
  // x * 2^k rounded once, as Python's math.ldexp (2^k alone may not be a double)
  const ldexp = (x, k) => (k < -1000 ? x * 2 ** -1000 * 2 ** (k + 1000) : x * 2 ** k);
  function sqrtRational([num, den]) {
    if (num === 0n) return 0;
    const k = Math.floor((bitLength(num) - bitLength(den)) / 2);
    const scaled = k >= 0 ? [num, den << BigInt(2 * k)] : [num << BigInt(-2 * k), den];
    return ldexp(Math.sqrt(ratToDouble(scaled)), k);
  }
  const MAX_DOUBLE = exactOf(Number.MAX_VALUE);
  const exceeds = ([a, b], [c, d]) => a * d > c * b;
  function stats(x) {
    const xs = x.map(exactOf), n = x.length;
    const mean = over(sum(xs), n);
    const centred = xs.map((v) => add(v, [-mean[0], mean[1]]));
    return { mean, centred, variance: over(sum(centred.map((c) => mul(c, c))), n),
             meanSquare: over(sum(xs.map((v) => mul(v, v))), n) };
  }
  function normed(s, x, eps) {
    const ln = sqrtRational(add(s.variance, exactOf(eps)));
    const rms = sqrtRational(add(s.meanSquare, exactOf(eps)));
    return { layernorm: s.centred.map((c) => ratToDouble(c) / ln), rmsnorm: x.map((v) => v / rms) };
  }
  const change = (a, b) => {
    const d = Math.max(...a.map((v, i) => Math.abs(v - b[i])));
    return isFinite(d) ? d : null;
  };
  DL.arith = {
    norms(x, eps) {
      const s = stats(x), r = normed(s, x, eps);
      const scaled = SCALE_FACTORS.map((factor) => {
        const big = x.map((v) => factor * v);
        const o = big.every(isFinite) ? stats(big) : null;
        if (o === null || exceeds(o.meanSquare, MAX_DOUBLE)) {
          return { factor, layernorm_change: null, rmsnorm_change: null };
        }
        const b = normed(o, big, eps);
        return { factor, layernorm_change: change(b.layernorm, r.layernorm), rmsnorm_change: change(b.rmsnorm, r.rmsnorm) };
      });
      return { kind: "norms", x, eps, mean: ratToDouble(s.mean), variance: ratToDouble(s.variance),
               mean_square: ratToDouble(s.meanSquare), rms: sqrtRational(s.meanSquare),
               centred: s.centred.map(ratToDouble), layernorm: r.layernorm, rmsnorm: r.rmsnorm, scaled };
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
