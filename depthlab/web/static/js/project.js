// Project measurements: the charts of every experiment's export.json, drawn generically
// (title, axes, log scale, series), with the export date; where an experiment has no
// data yet, the command that produces them and a button that starts the quick run in
// the background, with live progress from its status.json.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  DL.figures = DL.figures || {};
  const { $ } = DL.kit;

  // A series that shares its colour with an earlier one (4 and 12 layers of one arm: solid
  // and dashed) is drawn darker, so lines and legend keys differ in colour as well as dash.
  function colorOf(series, i) {
    const base = series[i].color || DL.charts.palette(i);
    const before = series.slice(0, i).filter((s, j) => (s.color || DL.charts.palette(j)) === base).length;
    return before ? DL.darker(base, Math.min(0.6, 0.35 * before)) : base;
  }

  DL.figures.project = function (source, showError) {
    const body = $("project-body");
    let list = [];
    const exports = {};
    const charts = [];
    let polling = null;

    function chartsOf(name, data, box) {
      for (const c of data.charts || []) {
        const el = DL.h("div", { class: "chart", id: "pc-" + name + "-" + c.id, data: { chart: c.id } });
        const card = DL.h("figure", { class: "pchart" }, DL.h("figcaption", {}, DL.tr(c.title)), el);
        box.append(card);
        // Series may have different x: merge onto one sorted x axis (uPlot's data model).
        const xs = [...new Set(c.series.flatMap((s) => s.x))].sort((a, b) => a - b);
        const onXs = (s, vs) => {
          const m = new Map(s.x.map((x, i) => [x, vs[i]]));
          return xs.map((x) => (m.has(x) ? m.get(x) : null));
        };
        const ys = c.series.map((s) => onXs(s, s.y));
        // the seed spread (min-max over seeds) of a series that has one
        const bands = c.series.map((s) => (s.lo && s.hi ? [onXs(s, s.lo), onXs(s, s.hi)] : null));
        const spread = (k, x) => {
          const b = bands[k];
          const i = xs.indexOf(x);
          return b && b[0][i] != null && b[1][i] != null
            ? DL.t("hover.band", { lo: DL.fmt(b[0][i], 4), hi: DL.fmt(b[1][i], 4) }) : "";
        };
        const chart = DL.charts.make(el, {
          title: () => DL.tr(c.title), xLabel: () => DL.tr(c.x_label), yLabel: () => DL.tr(c.y_label), yLog: !!c.y_log, height: 220,
          xInt: xs.every(Number.isInteger),
          hover: (x, v, k, vs) => DL.t("hover.project", { xname: DL.tr(c.x_label), x: DL.fmt(x, 4), v: vs,
                                                          row: DL.trData(c.series[k].label) }) + spread(k, x),
          series: c.series.map((s, i) => ({ label: () => DL.trData(s.label), color: colorOf(c.series, i),
                                            dash: !!s.dash, width: 1.5, points: s.x.length < 40 })),
        });
        chart.update(xs, ys, bands.some(Boolean) ? bands : null);
        charts.push({ chart, xs, ys });
      }
    }

    function renderOne(item) {
      const sec = DL.h("div", { class: "experiment", id: "exp-" + item.name });
      const data = exports[item.name];
      const q = (data && data.question) || item.question;
      sec.append(DL.h("h3", {}, DL.h("code", {}, item.name), q && DL.tr(q) ? ": " + DL.tr(q) : ""));
      if (!data) {
        sec.append(DL.h("p", {}, DL.t(source.kind === "static" ? "p.static" : "p.nodata")));
        if (source.kind !== "static") {
          sec.append(DL.h("pre", {}, item.command));
          const btn = DL.h("button", { type: "button", class: "run", id: "run-" + item.name,
                                       onclick: () => start(item.name, btn) }, DL.t("p.run"));
          sec.append(btn, DL.h("div", { class: "progress", id: "progress-" + item.name }));
        }
        return sec;
      }
      sec.append(DL.h("p", { class: "meta" }, DL.t("p.exported") + " " + data.exported_at + " · " + DL.t("p.budget") + " " +
        DL.trData(data.budget) + " · depthlab " + data.depthlab_version + " · ", DL.h("code", {}, data.command)));
      const grid = DL.h("div", { class: "pcharts" });
      sec.append(grid);
      chartsOf(item.name, data, grid);
      if (data.table && data.table.rows && data.table.rows.length) {
        const t = DL.h("table", { class: "num" },
          DL.h("thead", {}, DL.h("tr", {}, data.table.columns.map((c) => DL.h("th", {}, DL.trData(c, true))))),
          DL.h("tbody", {}, data.table.rows.map((r) => DL.h("tr", {}, r.map((v) =>
            DL.h("td", {}, typeof v === "number" ? DL.fmt(v, 4) : DL.trData(v)))))));
        sec.append(DL.h("div", { class: "table-wrap" }, t));
      }
      if (data.conclusions && data.conclusions.length) {
        sec.append(DL.h("p", {}, DL.h("b", {}, DL.t("p.conclusions"))),
                   DL.h("ul", {}, data.conclusions.map((c) => DL.h("li", {}, DL.tr(c)))));
      }
      return sec;
    }

    // Experiments with data (and the lesson's main one, `residual`) in full; the
    // others without data as one compact list of commands.
    function render() {
      body.textContent = "";
      charts.length = 0;
      const full = list.filter((i) => exports[i.name] || i.name === "residual");
      const rest = list.filter((i) => !full.includes(i));
      full.forEach((item) => body.append(renderOne(item)));
      if (rest.length) {
        body.append(DL.h("h3", {}, DL.t("p.others")));
        body.append(DL.h("ul", { class: "others" }, rest.map((i) => DL.h("li", { id: "exp-" + i.name },
          DL.h("code", {}, i.name), i.question ? DL.t("b.d.colon") + DL.tr(i.question) : "", " ",
          source.kind === "static" ? "" : DL.h("code", { class: "cmd" }, i.command)))));
      }
    }

    function load() {
      return source.experiments().then((items) => {
        list = items;
        return Promise.all(items.map((it) => (it.has_data === false ? null
          : source.experiment(it.name).then((d) => { exports[it.name] = d; }).catch(() => {}))));
      }).then(render).catch(showError);
    }

    function progress(name, st) {
      const el = $("progress-" + name);
      if (!el) return;
      const s = st.status || {};
      const job = st.job || {};
      el.textContent = "";
      if (job.returncode != null && job.returncode !== 0) {
        el.append(DL.h("p", { class: "red" }, DL.t("p.failed") + " (exit " + job.returncode + ")"),
                  DL.h("pre", {}, job.log_tail || ""));
        return;
      }
      const frac = s.runs_total ? (s.runs_done + (s.steps ? s.step / s.steps : 0)) / s.runs_total : 0;
      const bar = DL.h("progress", { max: "1", value: String(Math.min(1, frac)) });
      el.append(bar, DL.h("span", { class: "small" }, " " + DL.t("p.running") + " · " +
        (s.runs_done != null ? s.runs_done + "/" + s.runs_total : "") +
        (s.current_run ? " · " + s.current_run : "") + (s.steps ? " · step " + s.step + "/" + s.steps : "") +
        (s.message ? " · " + s.message : "")));
    }

    function poll(name) {
      clearTimeout(polling);
      source.status(name).then((st) => {
        progress(name, st);
        const running = st.job && st.job.running;
        if (running) polling = setTimeout(() => poll(name), 1000);
        else if (st.has_data) load();
      }).catch(showError);
    }

    function start(name, btn) {
      btn.disabled = true;
      source.run(name, "quick").then(() => poll(name)).catch((e) => {
        btn.disabled = false;
        const el = $("progress-" + name);
        if (el) el.textContent = DL.t("err.with", { what: DL.t("err"), message: e.message });
      });
    }

    load().then(() => {
      // A run started before this page was opened: show its progress.
      if (source.kind === "live") list.filter((i) => !exports[i.name]).forEach((i) =>
        source.status(i.name).then((st) => { if (st.job && st.job.running) poll(i.name); }).catch(() => {}));
    });
    return { update() {}, relabel: render };
  };
})();
