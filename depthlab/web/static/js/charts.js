// Charts: a thin layer over the vendored uPlot. make(el, spec) draws an empty chart and
// returns {update(xs, ys), relabel(), state()}; update redraws with new numbers and calls
// spec.onDraw after the canvas is painted. Labels are functions, so switching the
// language only rebuilds the axes. Red = plain stack, green = improved stack.
//
// Log charts are drawn as exponents on a linear axis (y = log10 v), with our own ticks
// at powers of ten. uPlot's own log axis (1.6.32) builds its tick list by stepping
// through each decade with a fixed-decimal rounding table; below about 1e-22 the steps
// stop reaching the next decade and the list grows until `RangeError: Invalid array
// length` (2 GB of heap first). The lesson's gradients go down to 1e-80 at N = 64, so
// the page never hands a log scale to uPlot. Every positive float64 has a finite
// exponent, so every value is drawn; an exact 0 (float underflow) has none and is drawn
// as a marker on the axis floor, its value in the hover read-out.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  // a..b inclusive: the x values of per-layer and per-write charts
  DL.range = (a, b) => Array.from({ length: b - a + 1 }, (_, i) => a + i);
  // The short names every figure module opens with (`const { $, h, t } = DL.kit;`), each
  // resolved when called, so a module may load before the one that defines it (DL.h: figures.js).
  DL.kit = {
    $: (id) => document.getElementById(id),
    h: (...a) => DL.h(...a),
    t: (k) => () => DL.t(k),
    fmt: (v, d) => DL.fmt(v, d),
    range: (a, b) => DL.range(a, b),
  };
  DL.COLORS = { plain: "#c62828", improved: "#2e7d32", theory: "#555555", accent: "#1565c0" };
  const PALETTE = ["#1565c0", "#c62828", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#5d4037", "#ad1457"];

  const SUP = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };
  const sup = (e) => String(e).split("").map((c) => SUP[c]).join("");
  const trim = (s) => (s.includes(".") && !s.includes("e") ? s.replace(/0+$/, "").replace(/\.$/, "") : s);

  // v with `digits` significant digits; outside [1e-3, 1e4) as m × 10ᵉ.
  function num(v, digits, lo, hi) {
    const a = Math.abs(v);
    if (a !== 0 && (a < lo || a >= hi)) {
      let e = Math.floor(Math.log10(a));
      let m = v / Math.pow(10, e);
      if (Math.abs(+m.toPrecision(digits)) >= 10) { m /= 10; e += 1; }
      const ms = trim(m.toPrecision(digits));
      return (ms === "1" ? "" : ms === "-1" ? "−" : ms + " × ") + "10" + sup(e);
    }
    return String(+v.toPrecision(digits)).replace(/^-/, "−");
  }
  // (The mantissa of a power of ten keeps digits - 1 of them, at least 2: 1.4 × 10⁻²⁰ by default.)
  DL.fmt = function (v, digits) {
    if (v == null || !isFinite(v)) return "—";
    const d = digits || 3;
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e4)) {
      const md = Math.max(2, d - 1);
      const e = Math.floor(Math.log10(a));
      let m = v / Math.pow(10, e);
      let ee = e;
      if (Math.abs(+m.toPrecision(md)) >= 10) { m /= 10; ee += 1; }
      return m.toPrecision(md) + " × 10" + sup(ee);
    }
    return String(+v.toPrecision(d));
  };
  // A value that DL.fmt would round to 1 but is not 1 (a cosine of 0.99999997): written
  // as 1 − (1 − v), whose digits say how close it is (1 − v is exact for v in [0.5, 2]).
  DL.fmtNear1 = function (v, digits) {
    const s = DL.fmt(v, digits);
    if (v == null || !isFinite(v) || v === 1 || s !== "1") return s;
    return v < 1 ? "1 − " + DL.fmt(1 - v, 2) : "1 + " + DL.fmt(v - 1, 2);
  };
  // Values to be compared side by side (the two stacks' cosines): near 1 as DL.fmtNear1,
  // and with as many digits as it takes for different values not to read the same.
  DL.fmtApart = function (vs, digits) {
    let d = digits || 3;
    const write = (k) => vs.map((v) => DL.fmtNear1(v, k));
    let out = write(d);
    const clash = (o) => o.some((s, i) => o.some((t, j) => j > i && s === t && vs[i] !== vs[j]));
    while (clash(out) && d < 17) out = write(++d);
    return out;
  };
  // An exact value as the server wrote it (depthlab.probes.exactnum.text), for people: the
  // digits are the server's, only the notation changes ("~1.23e-40" -> "≈ 1.23 × 10⁻⁴⁰",
  // "1e-64" -> "10⁻⁶⁴", "-2" -> "−2"). Nothing is computed here.
  DL.exact = function (text) {
    if (text == null) return "—";
    const m = /^(~?)(-?)([0-9.,]+)(?:e(-?\d+))?$/.exec(text);
    if (!m) return text;
    const [, approx, minus, digits, exp] = m;
    const sign = minus ? "−" : "";
    const body = exp === undefined ? digits
      : (digits === "1" && !approx ? "10" + sup(exp) : digits + " × 10" + sup(exp));
    return (approx ? "≈ " : "") + sign + body;
  };
  // "10⁻²⁶" for a value that is a power of ten, else DL.fmt: the one-line readings' form.
  DL.pow10 = (v) => {
    if (v == null || !isFinite(v) || v <= 0) return DL.fmt(v);
    const e = Math.log10(v);
    return Math.abs(e - Math.round(e)) < 1e-9 && Math.abs(e) >= 3 ? "10" + sup(Math.round(e)) : DL.fmt(v);
  };

  // Linear tick labels: the fewest significant digits that write every tick exactly
  // (1 × 10⁸ and 2 × 10⁸; 0.25, 0.5 and 0.75), so labels are right and distinct.
  function tickLabels(vs) {
    const exact = (v, d) => v == null || Math.abs(+v.toPrecision(d) - v) <= 1e-9 * Math.abs(v);
    let d = 1;
    while (d < 12 && !vs.every((v) => exact(v, d))) d++;
    return vs.map((v) => (v == null ? "" : num(v, d, 1e-2, 1e4)));
  }

  // Log tick labels from exponents: 10ᵏ, or plain numbers between 0.01 and 1000.
  const logLabel = (y) => {
    const v = Math.pow(10, y);
    const k = Math.round(y);
    if (Math.abs(y - k) < 1e-9) return k >= -2 && k <= 3 ? String(+v.toPrecision(1)) : "10" + sup(k);
    return num(v, 2, 1e-2, 1e4);
  };

  // Ticks of a log axis from its exponent range: whole decades, every `step` of them so that
  // at most 6 are labelled; within two decades also the 2s and 5s.
  const logStep = (span) => [1, 2, 5, 10, 20, 50, 100].find((s) => span / s <= 6) || 100;
  function logSplits(lo, hi) {
    const span = hi - lo;
    const step = logStep(span);
    const out = [];
    for (let k = Math.ceil(lo / step) * step; k <= hi + 1e-9; k += step) out.push(k);
    if (span <= 2) {
      for (let k = Math.floor(lo); k <= hi; k++) {
        for (const m of [2, 5]) {
          const y = k + Math.log10(m);
          if (y > lo + 1e-9 && y < hi - 1e-9) out.push(y);
        }
      }
      out.sort((a, b) => a - b);
    }
    return out;
  }

  // The exponent range of a log chart: whole decades around the data; the floor sits at
  // least a quarter decade under the smallest value so that its bar has a height.
  function logRange(ys) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const s of ys) for (const v of s) if (v != null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (lo === Infinity) return [-1, 0];
    lo = Math.floor(lo - 0.25);
    hi = Math.ceil(hi + 0.05);
    if (hi - lo < 1) hi = lo + 1;
    return [lo, hi];
  }

  // A linear axis: a 1-2-2.5-5 step giving about 4 intervals over the data, the range
  // widened to whole steps, so even a nearly flat series gets at least two labelled ticks.
  function linStep(lo, hi) {
    let span = hi - lo;
    if (!(span > 1e-12 * Math.max(Math.abs(lo), Math.abs(hi)))) span = Math.max(Math.abs(hi), 1) * 0.1;
    const raw = span / 4;
    const e = Math.floor(Math.log10(raw));
    const m = [1, 2, 2.5, 5, 10].find((k) => k * Math.pow(10, e) >= raw - 1e-12 * raw);
    return m * Math.pow(10, e);
  }
  function linRange(ys) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const s of ys) for (const v of s) if (v != null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (lo === Infinity) return [0, 1];
    const step = linStep(lo, hi);
    const a = Math.floor(lo / step + 1e-9) * step;
    let b = Math.ceil(hi / step - 1e-9) * step;
    if (b <= a) b = a + step;
    return [+a.toPrecision(12), +b.toPrecision(12)];
  }
  const linSplits = (lo, hi) => {
    const step = linStep(lo, hi);
    const out = [];
    for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step; k++) out.push(+(k * step).toPrecision(12));
    return out;
  };

  // A colour darker by `f` (0..1): a dashed series that shares its colour with a solid one.
  const darker = (hex, f) => "#" + [1, 3, 5].map((i) =>
    Math.round(parseInt(hex.slice(i, i + 2), 16) * (1 - f)).toString(16).padStart(2, "0")).join("");
  DL.darker = darker;

  // Vectors as arrows in a plane (the simulator's head-to-tail picture): segments
  // [{from: [x, y], to: [x, y], cls, text, opacity}] drawn in SVG with equal scales on both
  // axes (lengths and angles read true), the origin and every end in view. Hovering or
  // focusing a segment writes its text into `readout`; leaving puts `rest` back.
  const SVGNS = "http://www.w3.org/2000/svg";
  const svgEl = (tag, attrs) => {
    const el = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    return el;
  };
  DL.arrows = function (box, segments, readout, rest, label) {
    const W = 320;
    const H = 240;
    const PAD = 16;
    const pts = [[0, 0]].concat(...segments.map((s) => [s.from, s.to]));
    const xs = pts.map((p) => p[0]);
    const ys = pts.map((p) => p[1]);
    const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    const span = Math.max(x1 - x0, y1 - y0) > 0 ? 1 : 0;
    const k = span ? Math.min((W - 2 * PAD) / Math.max(x1 - x0, 1e-300), (H - 2 * PAD) / Math.max(y1 - y0, 1e-300)) : 1;
    const ox = W / 2 - k * (x0 + x1) / 2;
    const oy = H / 2 + k * (y0 + y1) / 2;
    const P = ([x, y]) => [ox + k * x, oy - k * y];
    const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "arrows", role: "img", "aria-label": label });
    const [cx, cy] = P([0, 0]);
    svg.append(svgEl("line", { x1: 0, y1: cy, x2: W, y2: cy, class: "axis" }),
               svgEl("line", { x1: cx, y1: 0, x2: cx, y2: H, class: "axis" }));
    segments.forEach((s, i) => {
      const [ax, ay] = P(s.from);
      const [bx, by] = P(s.to);
      const g = svgEl("g", { class: "seg " + s.cls, tabindex: "0", "data-i": i });
      if (s.opacity != null) g.setAttribute("opacity", s.opacity);
      const title = svgEl("title", {});
      title.textContent = s.text;
      g.append(title, svgEl("line", { x1: ax, y1: ay, x2: bx, y2: by, class: "hit" }),
               svgEl("line", { x1: ax, y1: ay, x2: bx, y2: by, class: "shaft" }));
      const len = Math.hypot(bx - ax, by - ay);
      if (len >= 3 && !s.dash) { // a head 8 px long; a shorter arrow is only its dot
        const [ux, uy] = [(bx - ax) / len, (by - ay) / len];
        const h = Math.min(8, len * 0.6);
        g.append(svgEl("polygon", { class: "head", points: [[bx, by], [bx - h * ux - 0.45 * h * uy, by - h * uy + 0.45 * h * ux],
                                                             [bx - h * ux + 0.45 * h * uy, by - h * uy - 0.45 * h * ux]].join(" ") }));
      }
      if (!s.dash) g.append(svgEl("circle", { cx: bx, cy: by, r: 2.2, class: "tip" }));
      if (s.tag) {
        const t = svgEl("text", { x: bx + 4, y: by - 4, class: "tag" });
        t.textContent = s.tag;
        g.append(t);
      }
      const show = () => { readout.textContent = s.text; g.classList.add("on"); };
      const hide = () => { readout.textContent = rest; g.classList.remove("on"); };
      g.addEventListener("pointerenter", show);
      g.addEventListener("focus", show);
      g.addEventListener("pointerleave", hide);
      g.addEventListener("blur", hide);
      svg.append(g);
    });
    box.textContent = "";
    box.append(svg);
    readout.textContent = rest;
  };

  const registry = new Map();

  DL.charts = {
    palette: (i) => PALETTE[i % PALETTE.length],
    // Every chart on the page by its element id: what it holds and what it drew (tests read this).
    all: () => Object.fromEntries([...registry].map(([k, c]) => [k, c.state()])),
    make(el, spec) {
      let plot = null;
      let raw = { xs: [], ys: spec.series.map(() => []) };
      let ticks = { x: [], y: [] };
      let draws = 0;
      let error = null;
      let broken = null; // where a linear y axis that does not reach zero starts (markBrokenAxis)
      const height = spec.height || 200;
      const bars = spec.series.some((s) => s.bars);
      const colors = spec.series.map((s) => s.color);
      const width = () => Math.max(240, el.clientWidth || 320);
      const toPlot = (ys) => (spec.yLog
        ? ys.map((s) => s.map((v) => (v != null && v > 0 && isFinite(v) ? Math.log10(v) : null)))
        : ys.map((s) => s.map((v) => (v != null && isFinite(v) ? v : null))));

      el.classList.add("chart-box");
      el.setAttribute("role", "img");
      el.tabIndex = 0;
      const title = DL.h("div", { class: "chart-ylab" });
      const canvasBox = DL.h("div", { class: "chart-canvas" });
      const legend = DL.h("div", { class: "chart-legend" });
      const tip = DL.h("div", { class: "chart-tip", role: "status" });
      const errBox = DL.h("div", { class: "chart-error", role: "alert" });
      el.textContent = "";
      el.append(title, canvasBox, tip, errBox);
      if (spec.legend !== false) el.append(legend);

      function fail(e) {
        error = String((e && e.message) || e);
        errBox.textContent = DL.t("err.with", { what: DL.t("err.chart"), message: error });
        errBox.style.display = "block";
        if (DL.showError) DL.showError(e);
        else throw e;
      }

      const describeValue = (v) => (v === 0 && spec.yLog ? DL.t("chart.zero", { why: DL.t("chart.underflow") }) : DL.fmt(v, 5));
      function hoverText(i) {
        const x = raw.xs[i];
        return spec.series.map((s, k) => {
          const v = raw.ys[k][i];
          if (v === undefined) return "";
          if (spec.hover) return spec.hover(x, v, k, describeValue(v));
          const lab = typeof s.label === "function" ? s.label() : s.label;
          return DL.t("chart.hover", { x: spec.xName ? spec.xName() : spec.xLabel(), at: DL.fmt(x, 4), label: lab, v: describeValue(v) });
        }).filter(Boolean).join("\n");
      }
      function summary() {
        const name = spec.title ? spec.title() : spec.yLabel();
        if (!raw.xs.length) return name;
        // the punctuation between the parts is the language's (，。：； in Chinese)
        if (spec.describe) return DL.t("chart.summary", { name, parts: spec.describe(raw.xs, raw.ys) });
        const last = raw.xs.length - 1;
        const parts = spec.series.map((s, k) => {
          const lab = typeof s.label === "function" ? s.label() : s.label;
          const ys = raw.ys[k];
          const band = raw.bands && raw.bands[k];
          return DL.t("chart.summary.series", { label: lab, x: spec.xLabel(), x0: DL.fmt(raw.xs[0]), y0: describeValue(ys[0]),
            x1: DL.fmt(raw.xs[last]), y1: describeValue(ys[last]),
            band: band && band[0][last] != null && band[1][last] != null
              ? DL.t("hover.band", { lo: DL.fmt(band[0][last], 4), hi: DL.fmt(band[1][last], 4) }) : "" });
        });
        return DL.t("chart.summary", { name, parts: parts.join(DL.t("chart.summary.sep")) });
      }

      // The y axis's width in CSS pixels: its longest label measured in the axis font, plus
      // the tick and the gap (uPlot asks again after the labels change, cycle by cycle).
      function axisWidth(u, values, axisIdx, cycle) {
        const ax = u.axes[axisIdx];
        if (cycle > 1 && ax._size) return ax._size;
        let widest = 0;
        if (values && values.length) {
          u.ctx.save();
          u.ctx.font = ax.font[0];
          for (const v of values) if (v) widest = Math.max(widest, u.ctx.measureText(String(v)).width);
          u.ctx.restore();
        }
        const ratio = window.devicePixelRatio || 1;
        return Math.max(40, Math.ceil(widest / ratio + (ax.ticks.size || 10) + (ax.gap || 5) + 6));
      }

      function opts() {
        const series = [{ label: spec.xName ? spec.xName() : "x" }].concat(
          spec.series.map((s) => {
            const o = { label: typeof s.label === "function" ? s.label() : s.label, stroke: s.color,
                        width: s.width || 2, points: { show: !!s.points, size: 5 },
                        // series of one chart may sample different x (eval every k steps vs a
                        // two-point baseline): draw each as a line across the others' x
                        spanGaps: true };
            if (s.dash) o.dash = [6, 4];
            if (s.dots) { // points only (one per head, say), no line between them
              o.paths = () => null;
              o.points = { show: true, size: 5, stroke: s.color, fill: s.color };
            }
            if (s.bars) {
              o.paths = uPlot.paths.bars({ size: [0.75, 40] });
              o.fill = s.color + "cc";
              o.points = { show: false };
              o.fillTo = (u) => (spec.yLog ? u.scales.y.min : 0);
            }
            return o;
          })
        );
        const scales = { x: { time: false }, y: {} };
        // spec.yMin: the smallest value the quantity can take (a rank + 1 is at least 1): no
        // tick below it on a log axis
        const logFloor = (r) => (spec.yMin > 0 ? [Math.max(r[0], Math.log10(spec.yMin)), Math.max(r[1], Math.log10(spec.yMin) + 1)] : r);
        if (spec.yLog && bars) { // bars stand on the floor: put it on a labelled tick
          scales.y.range = (u) => {
            const [lo, hi] = logFloor(logRange(u.data.slice(1).concat(bandValues())));
            let floor = lo;
            for (let i = 0; i < 4; i++) { // a lower floor can widen the step: settle both
              const step = logStep(hi - floor);
              if (floor % step === 0) break;
              floor = Math.floor(floor / step) * step;
            }
            return [floor, Math.max(hi, floor + 1)];
          };
        } else if (spec.yLog) scales.y.range = (u) => logFloor(logRange(u.data.slice(1).concat(bandValues())));
        else if (spec.yRange) scales.y.range = spec.yRange;
        // bars stand on zero: a linear bar chart's range always includes it (a bar of a
        // near-equal or signed value is then its true length from the baseline)
        else if (bars || spec.yZero) scales.y.range = (u) => linRange(u.data.slice(1).concat(bandValues(), [[0]]));
        else scales.y.range = (u) => linRange(u.data.slice(1).concat(bandValues()));
        if (spec.xRange) scales.x.range = spec.xRange;
        else if (bars || spec.xNames) scales.x.range = (u, lo, hi) => [lo - 0.5, hi + 0.5]; // no half bars at the edges
        const axis = () => ({ font: "12px sans-serif", labelFont: "12px sans-serif", stroke: "#333",
                              grid: { stroke: "#0000001a" }, ticks: { stroke: "#0000002a" } });
        const xAxis = Object.assign(axis(), { label: spec.xLabel(), labelSize: 18, size: 40 });
        xAxis.values = (u, vs) => { const l = tickLabels(vs); ticks.x = vs.map((v, i) => [v, l[i]]); return l; };
        if (spec.xInt) xAxis.incrs = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6];
        if (spec.xNames) { // categories at x = 0, 1, ...: one named tick each
          xAxis.splits = (u, i, lo, hi) => raw.xs.filter((x) => x >= lo && x <= hi);
          xAxis.values = (u, vs) => { const l = vs.map(spec.xNames); ticks.x = vs.map((v, i) => [v, l[i]]); return l; };
          // spec.xSlant (many names on a narrow chart): slanted, so that neighbours do not overlap
          if (spec.xSlant) Object.assign(xAxis, { rotate: -40, size: 92 });
        }
        // As wide as its longest tick label (a fixed 64 px cut "2.5 × 10¹⁹" to ".5×10¹⁹").
        const yAxis = Object.assign(axis(), { size: axisWidth });
        if (spec.yLog) {
          yAxis.splits = (u, i, lo, hi) => logSplits(lo, hi);
          yAxis.values = (u, vs) => { const l = vs.map(logLabel); ticks.y = vs.map((v, i) => [v, l[i]]); return l; };
        } else {
          if (!spec.yRange) yAxis.splits = (u, i, lo, hi) => linSplits(lo, hi);
          yAxis.values = (u, vs) => { const l = tickLabels(vs); ticks.y = vs.map((v, i) => [v, l[i]]); return l; };
        }
        return {
          width: width(), height, series, scales, legend: { show: false },
          cursor: { drag: { x: false, y: false, setScale: false }, points: { size: 8 } },
          axes: [xAxis, yAxis],
          padding: [10, spec.xSlant ? 40 : 14, 0, 0], // a slanted last name runs right
          hooks: {
            setCursor: [(u) => {
              const i = u.cursor.idx;
              if (i == null || u.cursor.left < 0) { tip.style.display = "none"; return; }
              tip.textContent = hoverText(i);
              tip.style.display = "block";
              const o = u.over.getBoundingClientRect();
              const b = el.getBoundingClientRect();
              const left = u.cursor.left + o.left - b.left;
              tip.style.left = Math.max(0, Math.min(left + 12, b.width - tip.offsetWidth - 4)) + "px";
              tip.style.top = Math.max(0, (u.cursor.top || 0) + o.top - b.top - tip.offsetHeight - 8) + "px";
            }],
            draw: [(u) => {
              const ctx = u.ctx;
              drawBands(u);
              markBrokenAxis(u);
              if (spec.yZero) { // the zero line, darker than the grid: where each bar starts
                const cy = Math.round(u.valToPos(0, "y", true)) + 0.5;
                ctx.save();
                ctx.strokeStyle = "#333";
                ctx.lineWidth = 1;
                ctx.beginPath();
                ctx.moveTo(u.bbox.left, cy);
                ctx.lineTo(u.bbox.left + u.bbox.width, cy);
                ctx.stroke();
                ctx.restore();
              }
              if (spec.yLog) { // an exact zero has no exponent: a marker on the axis floor
                raw.ys.forEach((ys, k) => ys.forEach((v, i) => {
                  if (v !== 0) return;
                  const cx = u.valToPos(raw.xs[i], "x", true);
                  const cy = u.bbox.top + u.bbox.height;
                  ctx.save();
                  ctx.fillStyle = colors[k];
                  ctx.beginPath();
                  ctx.moveTo(cx - 5, cy - 9);
                  ctx.lineTo(cx + 5, cy - 9);
                  ctx.lineTo(cx, cy);
                  ctx.fill();
                  ctx.restore();
                }));
              }
              if (spec.marker) {
                const x = spec.marker();
                if (x != null) {
                  const cx = u.valToPos(x, "x", true);
                  ctx.save();
                  ctx.strokeStyle = "#333";
                  ctx.setLineDash([3, 3]);
                  ctx.beginPath();
                  ctx.moveTo(cx, u.bbox.top);
                  ctx.lineTo(cx, u.bbox.top + u.bbox.height);
                  ctx.stroke();
                  ctx.restore();
                }
              }
              draws++;
              if (spec.onDraw) spec.onDraw();
            }],
          },
        };
      }

      // A linear axis that does not reach zero (a loss from 3.2 to 4.4) says so: a break
      // mark across the foot (or head) of the y axis and "(axis starts at 3.2, not 0)"
      // beside its label, so a gap never reads as a ratio. A chart that should start at
      // zero asks for it (spec.yZero).
      function markBrokenAxis(u) {
        const [lo, hi] = [u.scales.y.min, u.scales.y.max];
        broken = !spec.yLog && !spec.yRange && (lo > 0 || hi < 0) ? (lo > 0 ? lo : hi) : null;
        const text = spec.yLabel() + (broken == null ? "" : " " + DL.t(lo > 0 ? "chart.broken.low" : "chart.broken.high", { v: DL.fmt(broken, 4) }));
        if (title.textContent !== text) title.textContent = text;
        if (broken == null) return;
        const ctx = u.ctx;
        const r = window.devicePixelRatio || 1;
        const x = u.bbox.left;
        const y = lo > 0 ? u.bbox.top + u.bbox.height - 9 * r : u.bbox.top + 9 * r;
        ctx.save();
        ctx.strokeStyle = "#333";
        ctx.lineWidth = 1.5 * r;
        ctx.beginPath(); // the axis line at that end, cut by two slanted strokes
        ctx.moveTo(x, lo > 0 ? u.bbox.top + u.bbox.height : u.bbox.top);
        ctx.lineTo(x, lo > 0 ? y + 4 * r : y - 4 * r);
        ctx.moveTo(x, lo > 0 ? y - 4 * r : y + 4 * r);
        ctx.lineTo(x, lo > 0 ? y - 14 * r : y + 14 * r);
        for (const d of [-3 * r, 3 * r]) {
          ctx.moveTo(x - 6 * r, y + d + 2.5 * r);
          ctx.lineTo(x + 6 * r, y + d - 2.5 * r);
        }
        ctx.stroke();
        ctx.restore();
      }

      // The seed spread of a series: [lo[], hi[]] on the chart's x, drawn as a shaded band
      // between the points where both are known, with a whisker at each point.
      const plotValue = (v) => (v == null || !isFinite(v) ? null : spec.yLog ? (v > 0 ? Math.log10(v) : null) : v);
      const bandValues = () => (raw.bands || []).filter(Boolean).map(([lo, hi]) => lo.concat(hi).map(plotValue));
      function drawBands(u) {
        (raw.bands || []).forEach((b, k) => {
          if (!b) return;
          const pts = raw.xs.map((x, i) => [x, plotValue(b[0][i]), plotValue(b[1][i])])
            .filter(([, lo, hi]) => lo != null && hi != null)
            .map(([x, lo, hi]) => [u.valToPos(x, "x", true), u.valToPos(lo, "y", true), u.valToPos(hi, "y", true)]);
          if (!pts.length) return;
          const ctx = u.ctx;
          ctx.save();
          ctx.fillStyle = colors[k] + "33";
          ctx.strokeStyle = colors[k];
          ctx.lineWidth = 1.5;
          if (!spec.series[k].dots) { // points only (categories): whiskers, no area between them
            ctx.beginPath();
            pts.forEach(([x, , hi], i) => (i ? ctx.lineTo(x, hi) : ctx.moveTo(x, hi)));
            pts.slice().reverse().forEach(([x, lo]) => ctx.lineTo(x, lo));
            ctx.closePath();
            ctx.fill();
          }
          for (const [x, lo, hi] of pts) {
            ctx.beginPath();
            ctx.moveTo(x - 4, lo); ctx.lineTo(x + 4, lo);
            ctx.moveTo(x, lo); ctx.lineTo(x, hi);
            ctx.moveTo(x - 4, hi); ctx.lineTo(x + 4, hi);
            ctx.stroke();
          }
          ctx.restore();
        });
      }

      function drawLegend() {
        legend.textContent = "";
        spec.series.filter((s) => s.legend !== false).forEach((s) => {
          const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
          svg.setAttribute("width", "28");
          svg.setAttribute("height", "10");
          svg.setAttribute("aria-hidden", "true");
          const line = document.createElementNS("http://www.w3.org/2000/svg", "line");
          Object.entries({ x1: 1, y1: 5, x2: 27, y2: 5, stroke: s.color, "stroke-width": 2.5 })
            .forEach(([k, v]) => line.setAttribute(k, v));
          if (s.dash) line.setAttribute("stroke-dasharray", "6 4");
          if (s.dots) { line.setAttribute("stroke-dasharray", "2 6"); line.setAttribute("stroke-linecap", "round"); line.setAttribute("stroke-width", 4); }
          svg.append(line);
          const label = s.key || s.label; // key: the legend's words for a group of series (the heads)
          legend.append(DL.h("span", { class: "chart-key" }, svg, typeof label === "function" ? label() : label));
        });
      }

      function paint() {
        el.setAttribute("aria-label", summary());
        if (!plot) return;
        plot.setData([raw.xs, ...toPlot(raw.ys)]);
      }
      function build() {
        try {
          if (plot) plot.destroy();
          plot = null;
          canvasBox.textContent = "";
          title.textContent = spec.yLabel();
          drawLegend();
          plot = new uPlot(opts(), [raw.xs, ...toPlot(raw.ys)], canvasBox);
          el.setAttribute("aria-label", summary());
        } catch (e) {
          fail(e);
        }
      }
      build();
      el.addEventListener("mouseleave", () => { tip.style.display = "none"; });
      // The keyboard reads values too: focus a chart, then ← and → step through its points.
      let key = -1;
      el.addEventListener("keydown", (e) => {
        if (!plot || !raw.xs.length || (e.key !== "ArrowLeft" && e.key !== "ArrowRight")) return;
        e.preventDefault();
        key = Math.max(0, Math.min(raw.xs.length - 1, key + (e.key === "ArrowRight" ? 1 : -1)));
        const y = plot.data[1][key];
        plot.setCursor({ left: plot.valToPos(raw.xs[key], "x"), top: y == null ? 0 : plot.valToPos(y, "y") });
      });
      if (window.ResizeObserver) {
        let last = el.clientWidth;
        new ResizeObserver(() => {
          if (plot && el.clientWidth && el.clientWidth !== last) {
            last = el.clientWidth;
            plot.setSize({ width: width(), height });
          }
        }).observe(el);
      }
      const api = {
        // bands (optional): per series null or [lo[], hi[]] on xs
        update(xs, ys, bands) {
          raw = { xs, ys, bands: bands || null };
          error = null;
          errBox.style.display = "none";
          try {
            paint();
          } catch (e) {
            fail(e);
          }
        },
        relabel: build,
        state: () => ({
          xs: raw.xs, ys: raw.ys, bands: raw.bands || null, draws, error, log: !!spec.yLog,
          xTicks: ticks.x, yTicks: ticks.y,
          yScale: plot ? [plot.scales.y.min, plot.scales.y.max] : null,
          broken, yTitle: title.textContent,
          xScale: plot ? [plot.scales.x.min, plot.scales.x.max] : null,
          label: el.getAttribute("aria-label"),
        }),
      };
      if (el.id) registry.set(el.id, api);
      return api;
    },
  };
})();
