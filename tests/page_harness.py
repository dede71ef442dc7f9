"""Shared pieces of the browser tests: the served page, the browser, and a check, run
inside the page, that every chart of the simulator draws the data of the current state
with finite, distinct, correct tick labels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]

def micro_runs(tmp_path_factory) -> Path:
    """A micro `residual` experiment: real charts from a real (tiny) run."""
    from depthlab.experiments import run_experiment

    out = tmp_path_factory.mktemp("runs")
    run_experiment("residual", budget="micro", out_dir=out, progress=False, echo=False)
    return out


def chromium():
    """Debian's Chromium through Playwright, for a module's `browser` fixture."""
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def serve(runs_dir: Path):
    """The page on `runs_dir`, served on a free loopback port; returns (url, stop)."""
    from depthlab.web.app import create_app
    from tests.servers import live_server

    server = live_server(create_app(runs_dir, allowed_hosts=["127.0.0.1", "localhost"]))
    url = server.__enter__()
    return url + "/", lambda: server.__exit__(None, None, None)


def open_section(browser, url: str, section: str, width: int = 1400):
    """A new en-US page at `url`, `width` px wide, once the page is ready and the section
    `section` has drawn (its `#SECTION-body` says data-ready); returns (page, Watch)."""
    page = browser.new_page(viewport={"width": width, "height": 900}, locale="en-US")
    watch = Watch(page)
    page.goto(url)
    page.wait_for_function("() => window.DL && DL.ready", timeout=30000)
    page.wait_for_function(
        f"() => document.getElementById('{section}-body').dataset.ready === 'true'",
        timeout=60000)
    return page, watch


class Watch:
    """Console errors and every request the page makes."""

    def __init__(self, page):
        self.errors: list[str] = []
        self.urls: list[str] = []
        self.methods: list[str] = []  # each request's method, beside its url
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", self._request)

    def _request(self, r) -> None:
        self.urls.append(r.url)
        self.methods.append(r.method)


# A POST of JSON from inside the page, as api.js sends it: with the server's write token
# when /api/meta gives one (the server refuses writes without it).
POST_JSON = """(path, body) => fetch('api/meta').then((r) => r.json()).then((m) => fetch(path, {method: 'POST',
  headers: Object.assign({'content-type': 'application/json'}, m.token_header ? {[m.token_header]: m.write_token} : {}),
  body: JSON.stringify(body)})).then((r) => r.json())"""


# Set one simulator state, wait until the page has drawn it, and return what is wrong
# (a list of strings, empty when every chart is right). `want` is the data the charts
# must hold: {simulate, sweep} from the API, or from the embedded data of a static copy.
CHECK_STATE = r"""
async ([patch, wantFrom]) => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  DL.state.set(patch);
  const st = DL.state.get();
  const req = {mode: st.mode, n: st.n, g: st.g, residual: st.residual, norm: st.norm};
  let want;
  if (wantFrom === "api") {
    const post = (p, b) => (""" + POST_JSON + r""")(p, b);
    want = {sim: await post("api/simulate", req)};
    if (st.mode === "gradient") want.sweep = await post("api/sweep", {n: st.n, residual: st.residual, norm: st.norm});
  } else {
    // the stored answer (export.py: sections[name][key], repeated values in `shared`)
    const d = JSON.parse(document.getElementById("depthlab-data").textContent);
    const look = (name, r) => {
      const a = d.sections[name][DL.sectionKey(r, d.meta.sections.find((s) => s.name === name).defaults)];
      return a && Object.fromEntries(Object.entries(a).map(([k, v]) =>
        [k, v && typeof v === "object" && "$shared" in v ? d.shared[v.$shared] : v]));
    };
    want = {sim: look("simulate", req), sweep: look("sweep", {n: st.n, residual: st.residual, norm: st.norm})};
    if (!want.sim) return ["state " + JSON.stringify(req) + " is not in the static copy"];
  }
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  const range = (a, b) => Array.from({length: b - a + 1}, (_, i) => a + i);
  const n = st.n;
  const expect = st.mode === "gradient" ? {
    "c-plain-layers": [range(1, n), [want.sim.naive.per_layer]],
    "c-improved-layers": [range(1, n), [want.sim.improved.per_layer]],
    "c-bottom": [want.sweep.gains, [want.sweep.naive, want.sweep.improved]],
  } : {
    "c-plain-layers": [range(0, n), [want.sim.naive.rel_distance]],
    "c-improved-layers": [range(0, n), [want.sim.improved.rel_distance]],
    "c-bottom": [range(0, n), [want.sim.naive.mean_cosine, want.sim.improved.mean_cosine]],
  };
  expect["c-plain-rms"] = [range(0, want.sim.naive.stream_rms.length - 1), [want.sim.naive.stream_rms]];
  expect["c-improved-rms"] = [range(0, want.sim.improved.stream_rms.length - 1), [want.sim.improved.stream_rms]];
  // wait (at most 20 s) until every chart holds the wanted numbers
  const t0 = performance.now();
  let charts;
  for (;;) {
    charts = DL.charts.all();
    if (Object.entries(expect).every(([id, [xs, ys]]) => charts[id] && same(charts[id].xs, xs) && same(charts[id].ys, ys))) break;
    if (performance.now() - t0 > 20000) {
      return Object.entries(expect).filter(([id, [xs, ys]]) => !(charts[id] && same(charts[id].xs, xs) && same(charts[id].ys, ys)))
        .map(([id]) => id + " does not show the data of " + JSON.stringify(req));
    }
    await sleep(10);
  }
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  charts = DL.charts.all();
  const bad = [];
  const where = (id) => id + " at " + location.hash;
  const SUP = {"⁻": "-", "⁰": "0", "¹": "1", "²": "2", "³": "3", "⁴": "4", "⁵": "5", "⁶": "6", "⁷": "7", "⁸": "8", "⁹": "9"};
  const parse = (s) => {
    const m = s.replace(/−/g, "-").match(/^(?:(-?[\d.]+) × )?(-?)10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)$/);
    if (m) return (m[1] ? +m[1] : 1) * (m[2] ? -1 : 1) * Math.pow(10, +[...m[3]].map((c) => SUP[c]).join(""));
    return +s.replace(/−/g, "-");
  };
  for (const id of Object.keys(expect)) {
    const c = charts[id];
    if (c.error) bad.push(where(id) + ": error " + c.error);
    if (!c.draws) bad.push(where(id) + ": never drawn");
    if (!c.yScale || !c.yScale.every(isFinite) || !(c.yScale[1] > c.yScale[0])) bad.push(where(id) + ": y scale " + c.yScale);
    for (const axis of ["xTicks", "yTicks"]) {
      const ticks = c[axis].filter(([v, l]) => l !== "");
      if (ticks.length < 2) bad.push(where(id) + ": " + axis + " has " + ticks.length + " labels");
      const labels = ticks.map(([, l]) => l);
      if (new Set(labels).size !== labels.length) bad.push(where(id) + ": repeated " + axis + " " + labels.join(" "));
      for (const [v, l] of ticks) {
        const value = c.log && axis === "yTicks" ? Math.pow(10, v) : v;
        const got = parse(l);
        if (!isFinite(v) || !isFinite(got) || Math.abs(got - value) > 1e-6 * Math.abs(value))
          bad.push(where(id) + ": " + axis + " label " + l + " for " + value);
      }
    }
    // every value on the axis (log: its exponent within the y range; an exact 0 is a marker)
    c.ys.forEach((ys) => ys.forEach((v) => {
      if (v == null || (c.log && v === 0)) return;
      const y = c.log ? Math.log10(v) : v;
      if (y < c.yScale[0] - 1e-9 || y > c.yScale[1] + 1e-9) bad.push(where(id) + ": value " + v + " off the axis " + c.yScale);
    }));
    if (c.log && c.ys.some((ys) => ys.some((v) => v > 0))) {
      const lo = Math.min(...c.ys.flat().filter((v) => v > 0).map(Math.log10));
      if (lo - c.yScale[0] < 0.2) bad.push(where(id) + ": the smallest value sits on the axis floor");
    }
    if (id.endsWith("layers") && st.mode === "gradient") {
      const xs = c.xs;
      if (c.xScale[0] > xs[0] - 0.5 + 1e-9 || c.xScale[1] < xs[xs.length - 1] + 0.5 - 1e-9) bad.push(where(id) + ": edge bars clipped " + c.xScale);
    }
    if (!c.label || c.label.length < 20) bad.push(where(id) + ": no text alternative");
  }
  if (DL.errors.length) bad.push("page errors: " + DL.errors.join("; "));
  return bad;
}
"""


# The real-model section has its answer on screen (charts or an error), nothing in flight.
REALMODEL_SETTLED = """() => window.DL && DL.realmodel && !DL.realmodel.busy &&
  (DL.realmodel.result() !== null || document.getElementById('rm-error').textContent !== '' ||
   document.getElementById('rm-note').textContent !== '')"""

# ---- the zh view's stray English (tests/test_page_lang_a11y.py, tests/test_page_realmodel.py) ----
# The zh view's visible text may hold no Latin word outside this allow-list: symbols and
# units, terms of the field the Chinese text uses as they are, model, library and author
# names, and code (inside <code>/<pre>, or identifiers with a digit, an underscore or a dot).
ALLOWED = set("""
RMS RMSNorm LayerNorm Pre-Norm Post-Norm Pre-LN Post-LN Pre-RMSNorm QK-norm FFN SwiGLU GELU ReLU
sigmoid softmax logit logits warmup nats token Transformer DenseNet depthlab gamma beta eps LM
course lesson-anchor gpt llama qwen olmo tiny GPT Llama Qwen OLMo DeepSeek Vaswani Radford Touvron
Xiong Dong Qiu pre post sandwich output layernorm rmsnorm swiglu relu gelu rope learned plain scaled
none sqrt residual English GGUF TransformerLens arccos cos ReZero rezero
DeepNorm deepnorm HC hc mHC mhc AttnRes attnres Sinkhorn-Knopp CPU nanoGPT ResFormer nGPT ngpt
nanochat modded-nanogpt Muon U-net backout smear alpha DeltaNet
""".split())

# Text nodes a reader sees (not in <code>, <pre>, <script>, hidden parts), option text of
# selects, and every chart's aria-label.
VISIBLE_TEXT = r"""() => {
  const out = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const el = n.parentElement;
    if (!el || el.closest("code, pre, script, style, option, [aria-hidden=true]")) continue;
    // text marked as another language (a prompt in English): data, not a stray word
    const marked = el.closest("[lang]");
    if (marked && marked !== document.documentElement && !marked.lang.startsWith("zh")) continue;
    const cs = getComputedStyle(el);
    if (cs.display === "none" || cs.visibility === "hidden" || !el.getClientRects().length) continue;
    if (n.textContent.trim()) out.push(n.textContent.trim());
  }
  document.querySelectorAll("select").forEach((s) => {
    const o = s.selectedOptions[0];
    if (o && !(o.lang && !o.lang.startsWith("zh"))) out.push(o.text);
  });
  document.querySelectorAll("[role=img][aria-label]").forEach((e) => out.push(e.getAttribute("aria-label")));
  return out;
}"""


def stray_latin(texts: list[str]) -> list[str]:
    bad = []
    for t in texts:
        for tok in re.findall(r"[A-Za-z0-9_.'\-/]+", t):
            if re.search(r"[0-9_]|\w\.\w", tok):
                continue  # a number, a version, an identifier like d_ff or vaswani2017
            for word in re.findall(r"[A-Za-z][A-Za-z'\-]*[A-Za-z]|[A-Za-z]", tok):
                if len(word) > 2 and word not in ALLOWED and word.lower() not in ALLOWED:
                    bad.append(f"{word!r} in {t[:80]!r}")
    return bad
