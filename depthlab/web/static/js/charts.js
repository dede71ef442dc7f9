// Charts: a thin layer over the vendored uPlot. make(el, spec) draws an empty chart
// and returns {update(xs, ys), relabel()}; update redraws with new numbers and calls
// spec.onDraw after the canvas is painted. Labels are functions, so switching the
// language only rebuilds the axes. Red = plain stack, green = improved stack.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  DL.COLORS = { plain: "#c62828", improved: "#2e7d32", theory: "#555555", accent: "#1565c0" };
  const PALETTE = ["#1565c0", "#c62828", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#5d4037", "#ad1457"];

  const sup = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };
  // 3 significant digits; powers of ten as 1.4 × 10⁻²⁰ outside [1e-3, 1e4).
  DL.fmt = function (v, digits) {
    if (v == null || !isFinite(v)) return "—";
    const d = digits || 3;
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e4)) {
      const e = Math.floor(Math.log10(a));
      let m = v / Math.pow(10, e);
      let ee = e;
      if (Math.abs(+m.toPrecision(2)) >= 10) { m /= 10; ee += 1; }
      return m.toPrecision(2) + " × 10" + String(ee).split("").map((c) => sup[c]).join("");
    }
    return String(+v.toPrecision(d));
  };
  const tick = (v) => {
    if (v == null) return "";
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-2 || a >= 1e4)) {
      const e = Math.round(Math.log10(a));
      return "10" + String(e).split("").map((c) => sup[c]).join("");
    }
    return String(+v.toPrecision(3));
  };

  DL.charts = {
    palette: (i) => PALETTE[i % PALETTE.length],
    make(el, spec) {
      let plot = null;
      let data = null;
      const height = spec.height || 200;
      const width = () => Math.max(240, el.clientWidth || 320);
      const clean = (ys) => (spec.yLog ? ys.map((v) => (v != null && v > 0 && isFinite(v) ? v : null)) : ys);

      function opts() {
        const series = [{ label: spec.xName ? spec.xName() : "x" }].concat(
          spec.series.map((s) => {
            const o = { label: typeof s.label === "function" ? s.label() : s.label, stroke: s.color,
                        width: s.width || 2, points: { show: !!s.points, size: 5 },
                        // series of one chart may sample different x (eval every k steps vs a
                        // two-point baseline): draw each as a line across the others' x
                        spanGaps: true };
            if (s.dash) o.dash = [6, 4];
            if (s.bars) {
              o.paths = uPlot.paths.bars({ size: [0.75, 40] });
              o.fill = s.color + "cc";
              o.points = { show: false };
              if (spec.yLog) o.fillTo = (u) => u.scales.y.min;
            }
            return o;
          })
        );
        const scales = { x: { time: false }, y: {} };
        if (spec.yLog) scales.y = { distr: 3, log: 10 };
        if (spec.yRange) scales.y.range = spec.yRange;
        if (spec.xRange) scales.x.range = spec.xRange;
        const axis = (label) => ({ label: label(), labelSize: 18, size: 44, font: "12px sans-serif",
                                   labelFont: "12px sans-serif", stroke: "#333", values: (u, vs) => vs.map(tick),
                                   grid: { stroke: "#0000001a" }, ticks: { stroke: "#0000002a" } });
        const yAxis = axis(spec.yLabel);
        yAxis.size = 56;
        if (spec.yLog) {
          // Only powers of ten, and at most ~6 of them labelled: log grids get dense.
          const pow10 = (v) => v > 0 && Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9;
          // Within two decades uPlot ticks 1, 2, 3, ... 9: keep the 1-2-5 ones so labels don't crowd.
          const mantissa125 = (v) => v > 0 && [1, 2, 5].some(
            (m) => Math.abs(v / Math.pow(10, Math.floor(Math.log10(v) + 1e-9)) - m) < 1e-6);
          const keep = (u, splits) => {
            const n = splits.filter(pow10).length;
            if (n < 3) return splits.map((v) => (mantissa125(v) ? v : null));
            const step = Math.max(1, Math.ceil(n / 6));
            return splits.map((v) => (pow10(v) && Math.round(Math.log10(v)) % step === 0 ? v : null));
          };
          yAxis.filter = keep;
          yAxis.grid.filter = keep;
          yAxis.ticks.filter = keep;
        }
        return {
          width: width(), height, series, scales, legend: { show: spec.legend !== false, live: false },
          cursor: { show: false }, axes: [axis(spec.xLabel), yAxis],
          padding: [8, 12, 0, 0],
          hooks: {
            draw: [(u) => {
              if (spec.marker) {
                const x = spec.marker();
                if (x != null) {
                  const cx = u.valToPos(x, "x", true);
                  const ctx = u.ctx;
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
              if (spec.onDraw) spec.onDraw();
            }],
          },
        };
      }
      function build() {
        if (plot) plot.destroy();
        el.textContent = "";
        plot = new uPlot(opts(), data || [[], ...spec.series.map(() => [])], el);
      }
      build();
      if (window.ResizeObserver) {
        let last = el.clientWidth;
        new ResizeObserver(() => {
          if (plot && el.clientWidth && el.clientWidth !== last) {
            last = el.clientWidth;
            plot.setSize({ width: width(), height });
          }
        }).observe(el);
      }
      return {
        update(xs, ys) {
          data = [xs, ...ys.map(clean)];
          plot.setData(data);
        },
        relabel: build,
      };
    },
  };
})();
