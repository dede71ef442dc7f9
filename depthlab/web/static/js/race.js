// "How the field trains the stream today": the speedrun experiment's race, from
// /api/speedrun (depthlab.web.runs Runs.speedrun; a static copy embeds the same answer).
//   1. the leaderboard: each arm's CPU time to the target over the reference loop's (seed
//      mean, each seed, their range), the goal and the reference as lines, and a table;
//   2. validation loss against CPU-seconds, one line per arm, the target as a line;
//   3. each learned shortcut value per layer, at the first logged step and at the end.
// Without the experiment's export: the command that makes it. Everything here is the
// server's (depthlab.experiments.speedrun_readings: the order, the means and spreads, the
// one-line readings in both languages): this file draws and formats, it decides nothing.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  DL.figures = DL.figures || {};
  const { $, h, t, fmt } = DL.kit;
  const GOAL_COLOR = "#c62828";
  const REF_COLOR = "#7f7f7f";
  const BASE_COLOR = "#2e7d32";

  // mean ± spread as the server's sentences write it (one value alone)
  const pm = (m, s, n) => (m == null ? DL.t("sr.never") : n > 1 ? fmt(m, 3) + " ± " + fmt(s, 2) : fmt(m, 3));
  const readingOf = (race, id) => race.readings[id] || { text: null };

  const reading = (id, read) => h("p", { class: "reading", id: "reading-" + id }, DL.tr(read.text));

  function chartFigure(box, id, caption, read, spec, xs, ys, bands) {
    const el = h("div", { class: "chart wide", id: "c-" + id });
    const p = reading(id, read);
    box.append(h("figure", { class: "pchart" }, h("figcaption", {}, caption), p, el));
    DL.charts.make(el, spec).update(xs, ys, bands || null);
    return p;
  }

  // ---- 1. the leaderboard -------------------------------------------------------------
  function boardChart(box, race) {
    const rows = race.board;
    const xs = DL.range(1, rows.length);
    const plain = (role) => rows.map((r) => (r.role === role ? r.ratio_mean : null));
    const mean = rows.map((r) => (r.role ? null : r.ratio_mean));
    const seeds = Math.max(...rows.map((r) => r.seeds));
    const series = [
      { label: t("sr.series.mean"), color: "#333333", dots: true },
      { label: t("sr.mark.baseline"), color: BASE_COLOR, dots: true },
      { label: t("sr.mark.reference"), color: REF_COLOR, dots: true },
    ];
    const ys = [mean, plain("baseline"), plain("reference")];
    const bands = [[rows.map((r) => r.ratio_lo), rows.map((r) => r.ratio_hi)], null, null];
    if (seeds > 1) {
      for (let s = 0; s < seeds; s++) {
        series.push({ label: () => DL.t("sr.series.seed", { s: s + 1 }), color: DL.charts.palette(s), dots: true, legend: false });
        ys.push(rows.map((r) => (r.ratio[s] == null ? null : r.ratio[s])));
        bands.push(null);
      }
    }
    series.push({ label: () => DL.t("sr.series.goal", { goal: fmt(race.goal, 2) }), color: GOAL_COLOR, dash: true, width: 1.5 });
    ys.push(xs.map(() => race.goal));
    series.push({ label: t("sr.series.reference"), color: REF_COLOR, dash: true, width: 1.5 });
    ys.push(xs.map(() => 1));
    bands.push(null, null);
    const name = (i) => DL.tr(rows[i].label);
    const p = chartFigure(box, "sr-board", DL.t("sr.board.caption", { goal: fmt(race.goal, 2) }), readingOf(race, "sr-board"), {
      xLabel: t("sr.col.rank"), yLabel: t("sr.ax.ratio"), height: 260, xNames: (x) => String(x), yZero: true,
      title: t("sr.board.h"),
      hover: (x, v, k, vs) => {
        const r = rows[x - 1];
        if (k <= 2) return DL.t("sr.hover.board", { arm: name(x - 1), v: vs, n: r.at_target, m: r.seeds });
        const lab = series[k].label();
        return k < 3 + (seeds > 1 ? seeds : 0) ? DL.t("sr.hover.seed", { arm: name(x - 1), s: k - 2, v: vs })
          : DL.t("sr.hover.line", { row: lab, v: vs });
      },
      describe: () => rows.map((r, i) => DL.t("sr.describe.board", { rank: i + 1, arm: name(i), v: fmt(r.ratio_mean, 3) }))
        .join(DL.t("chart.summary.sep")),
      series,
    }, xs, ys, bands);
    p.dataset.fastest = readingOf(race, "sr-board").fastest || "";
  }

  function boardTable(box, race) {
    const cols = ["rank", "arm", "cpu", "ratio", "steps", "seeds", "pays"];
    const head = h("tr", {}, cols.map((c) => h("th", { scope: "col" }, DL.t("sr.col." + c))));
    const body = race.board.map((r, i) => {
      const mark = r.role ? h("span", { class: "sr-mark sr-mark-" + r.role }, DL.t("sr.mark." + r.role)) : null;
      const n = r.at_target;
      const ratio = r.ratio_mean == null ? DL.t("sr.never")
        : n > 1 ? fmt(r.ratio_mean, 3) + " (" + fmt(r.ratio_lo, 3) + "–" + fmt(r.ratio_hi, 3) + ")" : fmt(r.ratio_mean, 3);
      const pays = r.pays == null ? "—" : DL.t(r.pays ? "sr.yes" : "sr.no");
      return h("tr", { class: r.role ? "sr-row-" + r.role : "", data: { arm: r.arm } },
        h("td", {}, String(i + 1)), h("th", { scope: "row" }, DL.tr(r.label), mark ? " " : "", mark),
        h("td", {}, pm(r.cpu_mean, r.cpu_spread, n)), h("td", {}, ratio),
        h("td", {}, pm(r.steps_mean, r.steps_spread, n)),
        h("td", {}, DL.t("sr.seeds_at", { n, m: r.seeds })), h("td", {}, pays));
    });
    // a phone scrolls the table in its box: focusable, so the keyboard scrolls it too
    box.append(h("div", { class: "sr-table-wrap", tabindex: "0", role: "region", "aria-labelledby": "sr-board-h" }, h("table", { class: "sr-table", id: "sr-table", "aria-labelledby": "sr-board-h" },
      h("thead", {}, head), h("tbody", {}, body))));
    box.append(reading("sr-pay", readingOf(race, "sr-pay")));
  }

  // ---- 2. the curves --------------------------------------------------------------------
  function curvesChart(box, race) {
    const c = race.curves;
    if (!c) return;
    const series = c.lines.map((l, i) => ({ label: () => DL.tr(l.label), color: l.color || DL.charts.palette(i),
                                            dash: l.dash, width: 1.5, points: c.x.length < 40 }));
    series.push({ label: () => DL.t("sr.series.target", { target: fmt(c.target, 4) }), color: GOAL_COLOR, dash: true, width: 1.5 });
    const ys = c.lines.map((l) => l.y).concat([c.x.map(() => c.target)]);
    chartFigure(box, "sr-curves", DL.t("sr.curves.caption"), readingOf(race, "sr-curves"), {
      xLabel: t("sr.ax.cpu"), yLabel: t("sr.ax.loss"), height: 300, title: t("sr.curves.h"),
      hover: (x, v, k, vs) => DL.t("sr.hover.curve", { arm: series[k].label(), x: fmt(x, 4), v: vs }),
      describe: () => c.lines.map((l) => {
        const ok = l.y.filter((v) => v != null);
        return DL.t("sr.describe.curve", { arm: DL.tr(l.label), a: fmt(ok[0], 4), b: fmt(ok[ok.length - 1], 4) });
      }).join(DL.t("chart.summary.sep")),
      series,
    }, c.x, ys);
  }

  // ---- 3. the learned values -------------------------------------------------------------
  function learnedCharts(box, race) {
    box.append(h("h3", {}, DL.t("sr.learned.h")), h("p", {}, DL.t("sr.learned.p")));
    if (!race.learned.length) {
      box.append(h("p", { class: "note", id: "sr-learned-none" }, DL.t("sr.learned.none")));
      return;
    }
    const grid = h("div", { class: "pcharts" });
    box.append(grid);
    for (const e of race.learned) {
      const series = [
        { label: () => DL.t("sr.series.start", { step: e.start_step }), color: REF_COLOR, dash: true, width: 1.5, points: true },
        { label: () => DL.t("sr.series.end", { step: e.end_step }), color: "#1565c0", width: 2, points: true },
      ];
      const caption = DL.t("sr.learned.fig", { name: DL.tr(e.name), arm: DL.tr(e.label) });
      const read = readingOf(race, e.id);
      const p = chartFigure(grid, e.id, caption, read, {
        xLabel: t("sr.ax.layer"), yLabel: t("sr.ax.value"), height: 200, xNames: (x) => String(x),
        title: () => caption,
        hover: (x, v, k, vs) => DL.t("sr.hover.learned", { x, row: series[k].label(), v: vs }),
        series,
      }, e.layers, [e.start, e.end]);
      p.dataset.hi = read.hi;
      p.dataset.lo = read.lo;
    }
  }

  function notRun(box, source, command, problem) {
    if (problem) box.append(h("p", { class: "chart-error", role: "alert", style: "display: block" }, problem));
    box.append(h("p", { id: "sr-notrun" }, DL.t(source.kind === "static" ? "sr.static" : "sr.none")),
               h("pre", {}, command));
  }

  DL.figures.race = function (source, showError) {
    const body = $("race-body");
    let answer; // undefined: loading
    function render() {
      body.textContent = "";
      const race = answer && answer.has_data ? answer.race : null;
      if (!race) {
        if (answer) notRun(body, source, answer.command, answer.error || null);
        body.dataset.ready = String(answer !== undefined);
        return;
      }
      body.append(h("p", { class: "note", id: "sr-meta" }, DL.t("sr.meta", {
        budget: DL.trData(race.budget), seeds: (race.seeds || []).length, at: race.exported_at || "—",
        target: fmt(race.target, 4), ref: fmt(race.reference_cpu_s, 3) })));
      const board = h("div", { class: "panel", id: "sr-board" });
      const curves = h("div", { class: "panel", id: "sr-curves" });
      const learned = h("div", { class: "panel", id: "sr-learned" });
      body.append(board, curves, learned);
      board.append(h("h3", { id: "sr-board-h" }, DL.t("sr.board.h")));
      boardChart(board, race);
      boardTable(board, race);
      curves.append(h("h3", {}, DL.t("sr.curves.h")));
      curvesChart(curves, race);
      learnedCharts(learned, race);
      body.dataset.ready = "true";
    }
    source.speedrun().then((r) => { answer = r; render(); })
      .catch((e) => { answer = { has_data: false, command: "depthlab experiment speedrun --budget quick" }; render(); showError(e); });
    return { update() {}, relabel: render };
  };
})();
