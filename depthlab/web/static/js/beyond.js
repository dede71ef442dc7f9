// "Beyond: widening the stream" (the lesson's C15 teaser). Three parts:
//   1. links into the simulator above with the frontier residuals switched on (URL state);
//   2. the composite gain of HC's and mHC's mixing matrices over depth, computed by the
//      server (depthlab.probes.simulator_mixing; precomputed in a static copy);
//   3. the residual-frontier experiment's frontier.json: final loss per arm with its seeds
//      and the baselines, stream RMS per write after training, gradient per block at init
//      and after training, the learned mixing matrices of HC and mHC as heatmaps and
//      AttnRes's depth weights per sublayer. Without frontier.json: how to run it.
// Every chart has a one-line reading and hover read-outs. The readings are the server's
// (frontier.json's "readings" and each arm's seed "lo" / "hi", computed by
// depthlab.experiments.frontier_readings; the composite gain's by simulator_mixing): this
// file shows them and draws, it computes no number of its own.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  DL.figures = DL.figures || {};
  const { $, h, t, fmt, range } = DL.kit;
  const COMMAND = "depthlab experiment residual-frontier --budget quick";

  // The simulator settings the section points to (main.js routes a hash change to it).
  const TRY = [
    { residual: "deepnorm", norm: "rmsnorm", mode: "gradient", n: 64 },
    { residual: "rezero", norm: "none", mode: "gradient", n: 64 },
    { residual: "mhc", norm: "rmsnorm", mode: "gradient", n: 64 },
    { residual: "hc", norm: "rmsnorm", mode: "collapse", n: 32 },
    { residual: "attnres", norm: "rmsnorm", mode: "collapse", n: 32 },
  ];
  const label = (name) => (DL.hasKey("sim.res." + name) ? DL.t("sim.res." + name) : name);
  // An experiment arm's short name (the experiment's own key where the table has none).
  const armName = (arm) => (DL.hasKey("bx.arm." + arm) ? DL.t("bx.arm." + arm) : arm);

  function tryLinks(box, spec) {
    const names = (spec && spec.residuals) || [];
    const items = TRY.filter((s) => names.includes(s.residual)).map((s) => {
      const q = new URLSearchParams(location.hash.replace(/^#/, ""));
      for (const [k, v] of Object.entries(s)) q.set(k, String(v));
      const norm = s.norm === "rmsnorm"
        ? DL.t(spec.post_norm.includes(s.residual) ? "sim.t.postnorm" : "sim.t.prenorm") : DL.t("bx.try.nonorm");
      const a = h("a", { href: "#" + q.toString(), class: "bx-try", data: { residual: s.residual },
                         onclick: () => setTimeout(() => $("simulator").scrollIntoView(), 0) },
        label(s.residual), " · ", norm, " · N = " + s.n + " · ", DL.t("sim.mode." + s.mode));
      // HC and AttnRes show the plain residual's numbers at init: said beside the link
      const init = DL.hasKey("sim.init." + s.residual) ? h("div", { class: "note bx-try-init" }, DL.t("sim.init." + s.residual)) : null;
      return h("li", {}, a, init);
    });
    box.append(h("h3", {}, DL.t("bx.sim.h")), h("p", {}, DL.t("bx.sim.p")), h("ul", { class: "bx-tries" }, items));
  }

  // ---- the composite gain --------------------------------------------------------------
  function compositePart(box, r) {
    const el = h("div", { class: "chart wide", id: "c-composite" });
    const reading = h("p", { class: "reading", id: "reading-composite" });
    box.append(h("h3", {}, DL.t("bx.gain.h")), h("p", {}, DL.t("bx.gain.p", { n: r.streams, draws: r.draws, spread: r.spread })),
               reading, el);
    const rows = [r.hc, r.mhc];
    const names = [DL.t("bx.gain.hc"), DL.t("bx.gain.mhc")];
    const chart = DL.charts.make(el, {
      xLabel: t("bx.ax.writes"), yLabel: t("bx.ax.gain"), yLog: true, height: 230, xInt: true,
      hover: (x, v, k, vs) => {
        const i = r.depth.indexOf(x);
        return DL.t("bx.hover.gain", { x, v: vs, row: names[k], lo: fmt(rows[k].lo[i]), hi: fmt(rows[k].hi[i]) });
      },
      series: [{ label: t("bx.gain.hc"), color: DL.COLORS.plain }, { label: t("bx.gain.mhc"), color: DL.COLORS.improved }],
    });
    chart.update(r.depth, [r.hc.median, r.mhc.median], [[r.hc.lo, r.hc.hi], [r.mhc.lo, r.mhc.hi]]);
    const last = r.depth.length - 1;
    reading.textContent = DL.tr(r.reading);
    reading.dataset.hc = r.hc.median[last];
    reading.dataset.mhc = r.mhc.median[last];
  }

  // ---- frontier.json ---------------------------------------------------------------------
  const armsAt = (f, depth) => Object.entries(f.arms).filter(([, a]) => a.depth === depth);
  const depthsOf = (f) => [...new Set(Object.values(f.arms).map((a) => a.depth))].sort((a, b) => a - b);
  const finite = (vs) => (vs || []).filter((v) => v != null && isFinite(v));

  // The server's reading of a chart, by its element's id (without "reading-").
  const readingOf = (f, id) => f.readings[id] || { text: null };

  function figure(box, id, caption, readingText, spec, xs, ys, bands) {
    const el = h("div", { class: "chart wide", id });
    const reading = h("p", { class: "reading", id: "reading-" + id.slice(2) }, readingText);
    box.append(h("figure", { class: "pchart" }, h("figcaption", {}, caption), reading, el));
    DL.charts.make(el, spec).update(xs, ys, bands || null);
    return reading;
  }

  // Final validation loss per arm at one depth: each seed a dot, the mean with its min-max
  // over seeds (the server's lo / hi), and the unigram / bigram baselines as lines.
  function finalsChart(box, f, depth) {
    const arms = armsAt(f, depth);
    const xs = range(0, arms.length - 1);
    const seeds = Math.max(...arms.map(([, a]) => (a.final_val_loss || []).length), 0);
    const mean = arms.map(([, a]) => a.mean);
    const lo = arms.map(([, a]) => a.lo);
    const hi = arms.map(([, a]) => a.hi);
    const base = f.baselines || {};
    const series = [{ label: t("bx.loss.mean"), color: "#333333", dots: true }];
    const ys = [mean];
    for (let s = 0; s < seeds; s++) {
      series.push({ label: () => DL.t("bx.loss.seed", { s: s + 1 }), color: DL.charts.palette(s), dots: true, legend: s === 0 });
      ys.push(arms.map(([, a]) => (a.final_val_loss || [])[s]));
    }
    for (const [k, color] of [["unigram", "#8d6e63"], ["bigram", "#546e7a"]]) {
      if (base[k] == null) continue;
      series.push({ label: t("bx.loss." + k), color, dash: true, width: 1.5 });
      ys.push(xs.map(() => base[k]));
    }
    const read = readingOf(f, "bx-loss-" + depth);
    const reading = figure(box, "c-bx-loss-" + depth, DL.t("bx.loss.h", { depth }), DL.tr(read.text), {
      xLabel: t("bx.ax.arm"), yLabel: t("bx.ax.loss"), height: 240, xNames: (i) => (arms[i] ? armName(arms[i][1].arm) : ""), xSlant: arms.length > 4,
      hover: (x, v, k, vs) => (k === 0
        ? DL.t("bx.hover.loss", { arm: armName(arms[x][1].arm), v: vs, lo: fmt(lo[x], 4), hi: fmt(hi[x], 4), s: fmt(arms[x][1].spread, 2) })
        : (typeof series[k].label === "function" ? series[k].label() : series[k].label) + " = " + vs),
      series,
    }, xs, ys, [[lo, hi]].concat(ys.slice(1).map(() => null)));
    reading.dataset.best = read.best || "";
  }

  // One line per arm at one depth: a per-write or per-block profile (log y).
  function profileChart(box, f, depth, key, id, xLabel, yLabel, caption, x0) {
    const arms = armsAt(f, depth).filter(([, a]) => finite(a[key]).length);
    if (!arms.length) return;
    const len = Math.max(...arms.map(([, a]) => a[key].length));
    const xs = range(x0, x0 + len - 1);
    const ys = arms.map(([, a]) => xs.map((x, i) => (a[key][i] == null ? null : a[key][i])));
    // the reading: the top value's range over arms (RMS) or the bottom/top ratio (gradient)
    const read = readingOf(f, id.slice(2));
    const reading = figure(box, id, caption, DL.tr(read.text), {
      xLabel: t(xLabel), yLabel: t(yLabel), yLog: true, height: 230, xInt: true,
      hover: (x, v, k, vs) => DL.t("bx.hover.profile", { arm: armName(arms[k][1].arm), x, v: vs }),
      series: arms.map(([, a], i) => ({ label: () => armName(a.arm), color: a.color || DL.charts.palette(i), width: 1.5, points: len < 30 })),
    }, xs, ys);
    reading.dataset.lo = read.lo;
    reading.dataset.hi = read.hi;
  }

  // ---- heatmaps ------------------------------------------------------------------------
  // A colour for v on a diverging scale (blue < 0 < red), |v| relative to `top`.
  function colour(v, top) {
    if (v == null || !isFinite(v)) return "#eeeeee";
    const a = Math.min(1, Math.abs(v) / (top || 1));
    const mix = (c) => Math.round(255 + (c - 255) * a);
    const [r, g, b] = v >= 0 ? [198, 40, 40] : [21, 101, 192];
    return "rgb(" + mix(r) + "," + mix(g) + "," + mix(b) + ")";
  }

  // Small matrices side by side, PER_ROW to a line: one SVG, each matrix a grid of cells;
  // hovering a cell writes its value under the figure (and its <title> is the tooltip).
  const PER_ROW = 12;
  function heatmap(id, mats, titleOf, cellText, ariaLabel) {
    const NS = "http://www.w3.org/2000/svg";
    const cell = 9;
    const gap = 10;
    const top = Math.max(1e-12, ...mats.flatMap((m) => m.rows.flat().filter((v) => v != null).map(Math.abs)));
    const boxW = Math.max(...mats.map((m) => m.cols)) * cell + gap;
    const boxH = Math.max(...mats.map((m) => m.rows.length)) * cell + 16;
    const cols = Math.min(PER_ROW, mats.length);
    const width = cols * boxW;
    const height = Math.ceil(mats.length / PER_ROW) * boxH;
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("width", String(Math.min(width * 2, 1100)));
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", ariaLabel);
    svg.setAttribute("class", "heatmap");
    svg.id = id;
    const out = h("p", { class: "readout", id: id + "-ro", "aria-live": "polite" });
    mats.forEach((m, mi) => {
      const x = (mi % PER_ROW) * boxW;
      const y = Math.floor(mi / PER_ROW) * boxH;
      const label = document.createElementNS(NS, "text");
      label.setAttribute("x", String(x));
      label.setAttribute("y", String(y + 8));
      label.setAttribute("font-size", "7");
      label.textContent = titleOf(mi);
      svg.append(label);
      m.rows.forEach((row, i) => row.forEach((v, j) => {
        const r = document.createElementNS(NS, "rect");
        Object.entries({ x: x + j * cell, y: y + 12 + i * cell, width: cell - 1, height: cell - 1, fill: colour(v, top) })
          .forEach(([k, val]) => r.setAttribute(k, String(val)));
        const text = cellText(mi, i, j, v);
        const tip = document.createElementNS(NS, "title");
        tip.textContent = text;
        r.append(tip);
        r.addEventListener("mouseenter", () => { out.textContent = text; });
        svg.append(r);
      }));
    });
    return [svg, out];
  }

  function mixingPart(box, f) {
    for (const [key, entry] of Object.entries(f.learned || {})) {
      const mixing = entry.mixing || [];
      if (!mixing.length) continue;
      const arm = key.split("-").slice(1).join("-");
      const name = armName(arm);
      // the server's reading: the row and column sums' distance from 1 (0 for a doubly
      // stochastic matrix) and the entry farthest from the identity
      const read = readingOf(f, "bx-mix-" + key);
      const reading = h("p", { class: "reading", id: "reading-bx-mix-" + key }, DL.tr(read.text));
      reading.dataset.gain = read.gain;
      const [svg, out] = heatmap("hm-" + key, mixing.map((e) => ({ rows: e.matrix, cols: e.matrix.length })),
        (w) => String(w + 1), (w, i, j, v) => DL.t("bx.hover.mix", { name: mixing[w].name, i, j, v: fmt(v, 4) }),
        DL.t("bx.mix.aria", { arm: name, writes: mixing.length }) + " " + reading.textContent);
      box.append(h("figure", { class: "pchart" }, h("figcaption", {}, DL.t("bx.mix.h", { arm: name, key })), reading, svg, out));
    }
  }

  function depthPart(box, f) {
    for (const [key, entry] of Object.entries(f.learned || {})) {
      const rows = entry.depth_weights || [];
      if (!rows.length) continue;
      const k = Math.max(...rows.map((r) => r.weights.length));
      const padded = rows.map((r) => r.weights.concat(Array(k - r.weights.length).fill(null)));
      const read = readingOf(f, "bx-depth-" + key);
      const reading = h("p", { class: "reading", id: "reading-bx-depth-" + key }, DL.tr(read.text));
      reading.dataset.source = read.source;
      const [svg, out] = heatmap("hm-depth-" + key, [{ rows: padded, cols: k }], () => DL.t("bx.depth.axes"),
        (m, i, j, v) => DL.t("bx.hover.depth", { name: rows[i].name, src: j, v: v == null ? "—" : fmt(v, 4) }),
        DL.t("bx.depth.aria", { n: rows.length }) + " " + reading.textContent);
      box.append(h("figure", { class: "pchart" }, h("figcaption", {}, DL.t("bx.depth.h", { key })), reading, svg, out));
    }
  }

  function frontierPart(box, f) {
    box.append(h("h3", {}, DL.t("bx.exp.h")), h("p", {}, DL.t("bx.exp.p", { seeds: f.seeds })));
    const grid = h("div", { class: "pcharts" });
    box.append(grid);
    const depths = depthsOf(f);
    depths.forEach((d) => finalsChart(grid, f, d));
    for (const d of depths) {
      profileChart(grid, f, d, "stream_rms_trained", "c-bx-rms-" + d, "bx.ax.write", "bx.ax.rms",
                   DL.t("bx.rms.h", { depth: d }), 0);
      profileChart(grid, f, d, "grad_per_block_init", "c-bx-grad0-" + d, "bx.ax.block", "bx.ax.grad",
                   DL.t("bx.grad0.h", { depth: d }), 1);
      profileChart(grid, f, d, "grad_per_block_trained", "c-bx-grad1-" + d, "bx.ax.block", "bx.ax.grad",
                   DL.t("bx.grad1.h", { depth: d }), 1);
    }
    mixingPart(box, f);
    depthPart(box, f);
  }

  function notRun(box, source, command, problem) {
    box.append(h("h3", {}, DL.t("bx.exp.h")));
    if (problem) box.append(h("p", { class: "chart-error", role: "alert", style: "display: block" }, problem));
    box.append(h("p", { id: "bx-notrun" }, DL.t(source.kind === "static" ? "bx.exp.static" : "bx.exp.none")),
               h("pre", {}, command));
  }

  DL.figures.beyond = function (source, showError) {
    const body = $("beyond-body");
    let spec = null;
    let composite = null;
    let frontier; // undefined: loading; null: not run
    let command = COMMAND; // the server's, with its runs folder
    let problem = null; // a frontier.json that could not be read
    function render() {
      body.textContent = "";
      const sim = h("div", { class: "panel", id: "bx-sim" });
      const gain = h("div", { class: "panel", id: "bx-gain" });
      const exp = h("div", { class: "panel", id: "bx-exp" });
      body.append(sim, gain, exp);
      tryLinks(sim, spec);
      if (composite) compositePart(gain, composite);
      if (frontier) frontierPart(exp, frontier);
      else if (frontier === null) notRun(exp, source, command, problem);
      body.dataset.ready = String(composite != null && frontier !== undefined);
    }
    Promise.all([
      source.meta().then((m) => { spec = m.simulator; }),
      source.section("composite", {}).then((r) => { composite = r; }),
      source.frontier().then((r) => {
        frontier = r.has_data ? r.frontier : null;
        command = r.command;
        problem = r.error || null;
      }),
    ]).then(render).catch((e) => { frontier = frontier === undefined ? null : frontier; render(); showError(e); });
    return { update() {}, relabel: render };
  };
})();
