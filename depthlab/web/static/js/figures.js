// The lesson's other figures. Each is a function (source, showError) that builds its
// part of the page once and returns {update(state), relabel()}; all numbers come
// from the data source (the API, or the embedded data of a static copy).
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  DL.figures = DL.figures || {};
  const { $, fmt } = DL.kit;
  const int = (v) => (v == null ? "—" : Number(v).toLocaleString("en-US"));
  const shape = (s) => "[" + s.join(" × ") + "]";

  // Small DOM helper: h("td", {class: "x"}, "text", child, ...)
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") el.className = v;
      else if (k === "data") Object.assign(el.dataset, v);
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v);
    }
    for (const k of kids.flat()) if (k != null) el.append(k instanceof Node ? k : String(k));
    return el;
  }
  DL.h = h;

  function table(head, rows, cls) {
    return h("table", { class: cls || "num" },
      h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
      h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c))))));
  }

  // ---- 2. the cumulative data flow ----------------------------------------------------
  // A stage's name is its key in the text table (flow.stage.KEY); a stage no table names
  // shows its key as the anatomy wrote it.
  const stageName = (key) => (DL.hasKey("flow.stage." + key) ? DL.t("flow.stage." + key) : key);
  const inBlock = (st) => st.layers != null;

  // A model in one line, from its config (the same in both languages, nothing cut short).
  function describeModel(a) {
    const m = a.model;
    const preset = a.source.startsWith("preset ");
    const hidden = (a.shapes.find((x) => x.stage === "ffn hidden") || { shape: [0, m.d_ff] }).shape[1];
    return DL.t(preset ? "flow.src.preset" : "flow.src.config", { name: a.name }) + DL.t("b.d.colon") +
      DL.t("flow.src.facts", { L: m.n_layers, d: int(m.d_model), h: m.n_heads, kv: m.n_kv_heads || m.n_heads,
                               norm: m.norm, place: m.placement, ffn: m.ffn, pos: m.position, ff: int(hidden) });
  }

  DL.figures.dataflow = function (source, showError) {
    const select = $("flow-model");
    let anatomy = null;
    let picked = null;

    function detail(st) {
      const el = $("flow-detail");
      el.textContent = "";
      const a = anatomy;
      // the anatomy's numbers as it gives them: per layer, the blocks holding it, in all
      let params = int(st.params);
      if (st.layers != null) params = int(st.params_per_layer) + " × " + st.layers + " " + DL.t("flow.blocks") + " = " + int(st.params);
      if (st.tied) params = DL.t("flow.tied");
      const inner = (st.inner || []).map((x) => stageName(x.stage) + " " + shape(x.shape)).join(" · ");
      el.append(
        h("div", { class: "kv" }, h("b", {}, stageName(st.key)), " ", DL.t("flow.shape") + " ", h("code", {}, shape(st.shape)),
          " (T = " + a.tokens + ")"),
        inner ? h("div", { class: "kv small" }, inner) : "",
        h("div", { class: "kv" }, DL.t("flow.params") + DL.t("b.d.colon"), h("span", { id: "flow-params" }, params)),
        h("div", { class: "kv muted" }, DL.t("flow.total") + " " + int(a.total_params) + " · FFN " +
          fmt(100 * a.ffn_share) + "% · d_ff = " + fmt(a.ffn_multiple) + "d · " + a.n_writes + " " + DL.t("flow.writes")),
        h("div", { class: "kv muted small" }, describeModel(a)));
    }

    function render() {
      const box = $("flow-stages");
      box.textContent = "";
      if (!anatomy) return;
      const stages = [{ key: "tokens", shape: [anatomy.tokens], params: 0 }, ...anatomy.stages];
      let block = null;
      stages.forEach((st, i) => {
        const btn = h("button", { type: "button", class: "stage" + (inBlock(st) ? " in-block" : ""),
                                  data: { stage: st.key + ":" + i }, role: "listitem",
                                  onclick: () => { picked = st.key + ":" + i; DL.state.set({ stage: picked }); } },
          h("span", { class: "stage-name" }, stageName(st.key)), h("span", { class: "stage-shape" }, shape(st.shape)));
        if (inBlock(st)) {
          if (!block) {
            block = h("div", { class: "flow-block" }, h("span", { class: "flow-block-h" },
              "× " + anatomy.model.n_layers + " " + DL.t("flow.blocks")));
            box.append(block);
          }
          block.append(btn);
        } else {
          box.append(btn);
        }
      });
      const want = picked || "";
      let btn = [...box.querySelectorAll(".stage")].find((b) => b.dataset.stage === want);
      if (!btn) btn = box.querySelectorAll(".stage")[1];
      box.querySelectorAll(".stage").forEach((b) => b.classList.toggle("on", b === btn));
      const idx = +btn.dataset.stage.split(":").pop();
      detail(stages[idx]);
    }

    let loaded = null;
    function load(name) {
      if (loaded === name) return render();
      loaded = name;
      source.section("anatomy", { config: name }).then((a) => { anatomy = a; render(); })
        .catch((e) => { $("flow-detail").textContent = DL.t("err.paren", { what: DL.t("flow.missing"), message: e.message }); showError(e); });
    }

    source.anatomyConfigs().then((names) => {
      const first = ["course", "lesson-anchor"];
      // a config that shares a preset's name (gpt2) is the real model (the server answers the
      // shipped config first): list each name once
      const all = [...new Set(first.concat(names.presets.filter((n) => n !== "tiny"), names.configs))];
      select.textContent = "";
      all.forEach((n) => select.append(h("option", { value: n }, n)));
      select.value = DL.state.get().flow;
      if (!select.value) select.value = "course";
    }).catch(() => {});
    select.addEventListener("change", () => DL.state.set({ flow: select.value, stage: "" }));

    return {
      update(st) {
        picked = st.stage;
        if (select.value !== st.flow && [...select.options].some((o) => o.value === st.flow)) select.value = st.flow;
        load(st.flow);
      },
      relabel: render,
    };
  };

  // ---- 4. the residual formula: paths and Jacobian ---------------------------------------
  DL.figures.formula = function (source, showError) {
    const pn = $("pn");
    const pa = $("pa");
    let last = null;
    // the bounds are the server's (/api/meta limits.paths_n, paths_a), set on the inputs
    let bounds = null;
    let grid = null; // a static copy's N and a (meta.paths_grid)
    const gridNote = () => {
      $("paths-static").textContent = grid ? DL.t("f.static", { n: grid.n.join(", "), a: grid.a.map(fmt).join(", ") }) : "";
    };
    const limits = source.meta().then((m) => {
      grid = m.paths_grid || null;
      gridNote();
      bounds = { n: m.limits.paths_n, a: m.limits.paths_a };
      [pn.min, pn.max, pa.min, pa.max] = [...bounds.n, ...bounds.a];
    });
    const clamp = (v, [lo, hi]) => Math.min(hi, Math.max(lo, v));
    pn.addEventListener("input", () => pn.value && DL.state.set({ pn: +pn.value }));
    pa.addEventListener("input", () => pa.value !== "" && isFinite(+pa.value) && DL.state.set({ pa: +pa.value }));

    // Every number here is the server's exact text (depthlab.probes.exactnum): counts in
    // full, values exact or correctly rounded with "≈"; DL.exact only changes the notation.
    const X = (v) => DL.exact(v);
    const is = (t) => (t && t.startsWith("~") ? " " : " = "); // "= ≈ 0.0012" reads as "≈ 0.0012"
    function draw(ex, r) {
      last = [ex, r];
      const names = { "": "f.skip", "1": "f.l1", "2": "f.l2", "1,2": "f.both" };
      const box = $("paths-example");
      box.textContent = "";
      box.append(h("div", { class: "paths-h" }, DL.t("f.example") + DL.t("b.d.colon") + "x₂ = (1 + " + X(ex.scale_text) + ")² = " +
        ex.paths.map((p) => X(p.value_text)).join(" + ") + is(ex.residual_output_text) + X(ex.residual_output_text)));
      box.append(h("div", { class: "path-cards" }, ex.paths.map((p) =>
        h("div", { class: "path-card" + (p.layers.length === 2 ? " plain" : "") },
          h("div", { class: "path-v" }, X(p.value_text)), h("div", {}, DL.t(names[p.layers.join(",")]))))));
      const rows = r.groups.map((g) => [g.layers_passed, X(g.n_paths_text), X(g.value_each_text), X(g.total_text)]);
      const out = $("paths-expansion");
      out.textContent = "";
      Object.assign(out.dataset, { n: r.depth, a: r.scale_text }); // what is shown (tests wait on it)
      out.append(h("p", { class: "kv" }, "N = " + r.depth + ", a = " + X(r.scale_text) + ": ",
        h("b", { id: "paths-count" }, X(r.n_paths_text)),
        " " + DL.t("f.paths") + " · " + DL.t("f.total") + is(r.residual_output_text),
        h("b", { id: "paths-total" }, X(r.residual_output_text)),
        " · " + DL.t("f.plain") + is(r.plain_output_text), h("b", { class: "red", id: "paths-plain" }, X(r.plain_output_text))));
      const shown = rows.length > 12 ? rows.slice(0, 6).concat([["…", "", "", ""]], rows.slice(-5)) : rows;
      // long exact numbers scroll sideways on a narrow screen rather than being cut
      out.append(h("div", { class: "table-wrap" },
        table([DL.t("f.k"), DL.t("f.count"), DL.t("f.each"), DL.t("f.sum")], shown, "num exact-table")));
      out.append(h("p", { class: "note" }, DL.t("f.exact")));
      const jac = $("paths-jacobian");
      jac.textContent = "";
      jac.append(DL.t("f.jac") + "  N = " + r.depth + ": (" + X(r.jacobian_factor_text) + ")" + "^" + r.depth + is(r.jacobian_text),
        h("b", { id: "paths-jac" }, X(r.jacobian_text)), " " + DL.t("f.vs") + " ",
        h("b", { id: "paths-jac-plain" }, X(r.plain_jacobian_text)), DL.t("f.end"));
    }

    return {
      update(st) {
        limits.then(() => {
          // within the server's bounds, and on a static copy's grid of N and a
          const { n, a } = source.snap("paths", { n: clamp(st.pn, bounds.n), a: clamp(st.pa, bounds.a) });
          if (n !== st.pn || a !== st.pa) return DL.state.set({ pn: n, pa: a });
          if (+pn.value !== n) pn.value = n;
          if (+pa.value !== a) pa.value = a;
          return Promise.all([source.section("paths", { n: 2, a }), source.section("paths", { n, a })]).then(([ex, r]) => draw(ex, r));
        }).catch(showError);
      },
      relabel: () => { gridNote(); if (last) draw(...last); },
    };
  };

  // ---- 5. the stream grows ---------------------------------------------------------------
  DL.figures.growth = function (source, showError) {
    const t = (k) => () => DL.t(k);
    const chart = DL.charts.make($("c-growth"), {
      xLabel: t("g.ax.k"), yLabel: t("g.ax.rms"), height: 220, xInt: true,
      hover: (x, v, k, vs) => DL.t("hover.growth", { x, v: vs, row: DL.t(k === 0 ? "g.measured" : "g.theory") }),
      series: [{ label: t("g.measured"), color: DL.COLORS.accent }, { label: t("g.theory"), color: DL.COLORS.theory, dash: true }],
    });
    let r = null;
    function draw() {
      const k = r.measured_rms.length - 1;
      chart.update(r.measured_rms.map((_, i) => i), [r.measured_rms, r.expected]);
      $("ro-growth").textContent = DL.t("g.after") + " " + k + " " + DL.t("g.writes") + DL.t("b.d.colon") + DL.t("g.measured") + " " +
        fmt(r.measured_rms[k]) + " · √(1 + " + k + ") = " + fmt(r.expected[k]) + " · " +
        DL.t("g.over", { s: int(r.request.samples), w: r.request.width, seed: r.request.seed }); // what "measured" averages
      $("reading-growth").textContent = DL.t("read.growth", { k, m: fmt(r.measured_rms[k]), e: fmt(r.expected[k]) });
    }
    source.section("growth", { writes: 128 }).then((x) => { r = x; draw(); }).catch(showError);
    return { update() {}, relabel: () => { chart.relabel(); if (r) draw(); } };
  };

  // ---- 6. the block diagram, drawn from the config's norm slots ---------------------------
  const SVG = "http://www.w3.org/2000/svg";
  function s(tag, attrs, text) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text != null) el.textContent = text;
    return el;
  }

  // The block as SVG, plus its data path: one step per thing the stream goes through, in
  // order (read, norm, transform, scale, add, and a norm after the add for Post-Norm), each
  // step tagging the SVG parts it lights up when the path is animated.
  function blockSvg(b) {
    const SX = 70; // the stream's x
    const CX = 250; // the sublayer column's centre
    const BW = 150;
    const BH = 30;
    const GAP = 14;
    const normName = b.norm_label; // the server's name for the config's norm (config.NORM_LABELS)
    const items = []; // [kind, y (upward), ...]
    const steps = []; // {kind, sub}
    const step = (kind, sub) => steps.push({ kind, sub }) - 1;
    let y = 20;
    items.push(["label", y, "x_l  [T × " + b.d_model + "]"]);
    y += 24;
    for (const sub of ["attn", "ffn"]) {
      const start = y;
      const boxes = [];
      const read = step("read", sub);
      if (b.slots.includes("in")) boxes.push(["norm", normName, step("norm", sub)]);
      boxes.push(["sub", sub === "attn" ? DL.t("b.attn") + (b.attn_gate ? " + " + DL.t("b.gate") : "") + (b.qk_norm ? ", QK-norm" : "")
                              : DL.t("b.ffn_box", { kind: b.ffn, hidden: b.ffn_hidden }), step("transform", sub)]);
      const gated = sub === "attn" && b.attn_gate;
      if (gated) boxes.push(["scale", "× σ(" + DL.t("b.gate") + ")", step("scale", sub)]);
      if (b.slots.includes("out")) boxes.push(["norm", normName, step("norm", sub)]);
      const scaled = b.write_scale !== 1 ? step("scale", sub) : null;
      let by = start + 16;
      for (const [kind, text, at] of boxes) {
        items.push(["box", by, kind, text, at]);
        by += BH + GAP;
      }
      y = by + 4;
      const add = step("add", sub);
      items.push(["branch", start, by - GAP, y, read, add]);
      items.push(["add", y, scaled != null ? "× " + fmt(b.write_scale) : "", add, scaled]);
      y += 22;
      if (b.slots.includes("post")) {
        items.push(["postnorm", y, normName, step("norm", sub)]);
        y += BH + GAP;
      }
    }
    const tail = "… × " + b.n_layers + " → " + (b.final_norm ? DL.t("b.final") + " → " : "") + DL.t("b.head");
    items.push(["note", y + 4, tail]);
    y += 26;
    items.push(["label", y, "x_l+1"]);
    const H = y + 16;
    const svg = s("svg", { viewBox: "0 0 420 " + H, class: "block-svg", role: "img", "aria-label": DL.t("b.alt") });
    const Y = (v) => H - v;
    const residual = b.residual !== "none";
    const at = (el, i) => { if (i != null) el.dataset.step = i; return el; };
    svg.append(s("line", { x1: SX, y1: Y(32), x2: SX, y2: Y(y - 14), class: residual ? "stream" : "stream broken" }));
    // named at its foot, right of the line: a rotated label along it would sit under norm boxes
    svg.append(s("text", { x: SX + 8, y: Y(30), class: "side" }, DL.t("b.stream")));
    for (const it of items) {
      const [kind, v] = it;
      if (kind === "label") svg.append(s("text", { x: SX - 30, y: Y(v) + 5, class: "lbl" }, it[2]));
      else if (kind === "note") svg.append(s("text", { x: SX + 18, y: Y(v) + 4, class: "small" }, it[2]));
      else if (kind === "box") {
        const cls = it[2] === "norm" ? "b-norm" : it[2] === "scale" ? "b-scale" : "b-sub";
        svg.append(at(s("rect", { x: CX - BW / 2, y: Y(v + BH), width: BW, height: BH, rx: 5, class: cls }), it[4]));
        svg.append(s("text", { x: CX, y: Y(v + BH / 2) + 4, class: "ctr" }, it[3]));
      } else if (kind === "branch") {
        const [, y0, y1, ya, read, add] = it;
        svg.append(at(s("path", { d: `M${SX},${Y(y0)} H${CX} V${Y(y0 + 16)}`, class: "wire" }), read));
        svg.append(at(s("path", { d: `M${CX},${Y(y1)} V${Y(ya)} H${SX + 9}`, class: "wire" }), add));
      } else if (kind === "add") {
        svg.append(at(s("circle", { cx: SX, cy: Y(v), r: 9, class: residual ? "b-add" : "b-add off" }), it[3]));
        svg.append(s("text", { x: SX, y: Y(v) + 5, class: "ctr plus" }, "+"));
        if (it[2]) svg.append(at(s("text", { x: SX + 14, y: Y(v) - 10, class: "small" }, it[2]), it[4]));
      } else if (kind === "postnorm") {
        svg.append(at(s("rect", { x: SX - 55, y: Y(v + BH), width: 110, height: BH, rx: 5, class: "b-norm" }), it[3]));
        svg.append(s("text", { x: SX, y: Y(v + BH / 2) + 4, class: "ctr" }, it[2]));
      }
    }
    return { svg, steps };
  }

  DL.figures.block = function (source, showError) {
    const presetSel = $("b-preset");
    const placeSel = $("b-placement");
    let last = null;
    let placements = [];
    const facts = source.meta().then((m) => {
      presetSel.textContent = "";
      m.presets.filter((p) => p.name !== "tiny").forEach((p) => presetSel.append(h("option", { value: p.name }, p.name)));
      presetSel.value = DL.state.get().preset;
      placements = m.placements;
      placeSel.textContent = "";
      ["", ...placements].forEach((p) => placeSel.append(h("option", { value: p }, p || "—")));
    });
    facts.catch(showError);
    presetSel.addEventListener("change", () => DL.state.set({ preset: presetSel.value, place: "" }));
    // The data path, lit one step at a time (every 0.9 s; held still under reduced motion).
    let path = [];
    let timer = null;
    let at = 0;
    DL.blockPath = () => path.map((p) => ({ kind: p.kind, sub: p.sub }));
    function show(box) {
      box.querySelectorAll("[data-step]").forEach((e) => e.classList.toggle("on", +e.dataset.step === at));
      const p = path[at];
      $("block-step").textContent = p ? (at + 1) + "/" + path.length + " · " +
        DL.t("b.step." + (p.kind === "add" && last.residual === "none" ? "write" : p.kind),
             { sub: DL.t(p.sub === "attn" ? "b.attn" : "b.ffn") }) : "";
    }
    function animate(box) {
      clearInterval(timer);
      at = 0;
      show(box);
      if (window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches) return;
      timer = setInterval(() => { at = (at + 1) % path.length; show(box); }, 900);
    }
    placeSel.addEventListener("change", () => DL.state.set({ place: placeSel.value }));

    function draw(b) {
      last = b;
      const box = $("block-svg");
      box.textContent = "";
      const drawn = blockSvg(b);
      box.append(drawn.svg);
      path = drawn.steps;
      animate(box);
      const slots = b.slots.length ? b.slots.join(" + ") : "—";
      const txt = $("block-text");
      txt.textContent = "";
      const sep = DL.t("b.d.sep");
      txt.append(
        h("div", {}, h("b", {}, b.preset), DL.t("b.d.colon") + DL.t("b.d.placement") + " ", h("code", {}, b.placement),
          sep + DL.t("b.d.norm") + " ", h("code", {}, b.norm), sep + DL.t("b.d.slots") + " ", h("code", { id: "block-slots" }, slots)),
        h("div", {}, DL.t("b.d.residual") + " ", h("code", {}, b.residual), sep + b.n_layers + " × 2 = " + b.writes + " " +
          DL.t("b.d.writes")),
        b.residual === "none" ? h("div", { class: "red" }, DL.t("b.nores")) : "");
    }
    return {
      update(st) {
        facts.then(() => {
          if (presetSel.value !== st.preset && [...presetSel.options].some((o) => o.value === st.preset)) presetSel.value = st.preset;
          const place = placements.includes(st.place) ? st.place : ""; // a placement /api/meta does not list: the preset's own
          placeSel.value = place;
          return source.section("block", { preset: st.preset, placement: place || null }).then(draw);
        }).catch(showError);
      },
      relabel: () => last && draw(last),
    };
  };

  // ---- 7. LayerNorm vs RMSNorm ------------------------------------------------------------
  DL.figures.norms = function (source, showError) {
    const input = $("vec");
    let last = null;
    let maxLength = null, maxAbs = null; // /api/meta limits.vector_length, vector_abs
    const limits = source.meta().then((m) => { maxLength = m.limits.vector_length; maxAbs = m.limits.vector_abs; });
    input.addEventListener("input", () => DL.state.set({ vec: input.value }));
    document.querySelectorAll("[data-vec]").forEach((b) =>
      b.addEventListener("click", () => DL.state.set({ vec: b.dataset.vec })));
    const send = DL.latestOnly((x) => source.section("norms", { x, eps: 1e-5 }), draw, (e) => {
      $("norms-out").textContent = DL.t("err.with", { what: DL.t("err"), message: e.message });
    });

    function draw(r) {
      last = r;
      const out = $("norms-out");
      out.textContent = "";
      out.append(h("p", { class: "kv" },
        DL.t("n.mean") + " = ", h("b", { id: "norm-mean" }, fmt(r.mean, 4)), " · " + DL.t("n.var") + " = ",
        h("b", {}, fmt(r.variance, 4)), " · " + DL.t("n.rms") + " = ", h("b", { id: "norm-rms" }, fmt(r.rms, 4))));
      const cols = r.x.map((_, i) => i);
      const row = (name, vs) => [name].concat(cols.map((i) => fmt(vs[i], 4)));
      out.append(table(["", ...cols.map((i) => "x" + (i + 1))], [
        row("x", r.x), row("x − " + DL.t("n.mean"), r.centred), row(DL.t("n.ln"), r.layernorm), row(DL.t("n.rn"), r.rmsnorm),
      ], "num norms-table"));
      out.append(h("p", { class: "note", id: "norm-eps" }, DL.t("n.eps", { eps: fmt(r.eps) })));
      out.append(h("p", { class: "note", id: "norm-scaled" }, scaling(r)));
    }
    // What scaling x does, read from the server's measurement (r.scaled: per factor c, the
    // largest change of each output when x becomes c·x): nothing visible in the 4 decimals
    // shown, or how much, since eps stops being negligible for a small vector.
    const SHOWN = 5e-5; // half a unit in the 4th decimal: a smaller change is not seen above
    function scaling(r) {
      const factor = (c) => (c < 1 ? "1/" + fmt(1 / c) : fmt(c));
      const worst = (s) => Math.max(s.layernorm_change == null ? Infinity : s.layernorm_change,
                                    s.rmsnorm_change == null ? Infinity : s.rmsnorm_change);
      const sorted = (r.scaled || []).slice().sort((a, b) => worst(b) - worst(a));
      if (!sorted.length) return "";
      const top = sorted[0];
      if (worst(top) < SHOWN) {
        return DL.t("n.scale.same", { c: r.scaled.map((s) => factor(s.factor)).join(DL.t("n.or")), d: fmt(worst(top), 2) });
      }
      return DL.t("n.scale.eps", { c: factor(top.factor), ln: fmt(top.layernorm_change, 2), rn: fmt(top.rmsnorm_change, 2),
                                   eps: fmt(r.eps) });
    }
    return {
      update(st) {
        if (input.value !== st.vec) input.value = st.vec;
        const x = DL.parseNumbers(st.vec).x || [NaN]; // full-width digits and commas too
        limits.then(() => {
          if (!x.length || x.length > maxLength || x.some((v) => !(Math.abs(v) <= maxAbs))) {
            $("norms-out").textContent = DL.t("n.bad", { n: maxLength, max: fmt(maxAbs) });
            return;
          }
          send(x);
        }).catch(showError);
      },
      relabel: () => last && draw(last),
    };
  };

  // ---- 8. the evolution table ---------------------------------------------------------------
  const initStd = (r) => {
    const v = r.residual_init_std_text;
    if (v == null) return fmt(r.residual_init_std);
    if (!r.residual_init_rule) return DL.exact(v);
    return r.residual_init_rule + (v.startsWith("~") ? " ≈ " + DL.exact(v.slice(1)) : " = " + DL.exact(v));
  };
  DL.figures.evolution = function (source, showError) {
    let rows = null;
    function draw() {
      const zh = DL.lang() === "zh";
      const head = [DL.t("e.part")].concat(rows.map((r) => (zh ? r.generation_zh : r.generation) + " · " + r.name));
      const line = (label, f) => [label].concat(rows.map(f));
      const normName = (r) => r.norm + (r.qk_norm ? " + QK-norm" : "");
      const body = [
        line("FFN", (r) => r.ffn + ", " + int(r.d_model) + " → " + int(r.d_ff) + " (" + fmt(r.ffn_multiple) + "d)"),
        line(DL.t("e.ffnshare"), (r) => fmt(100 * r.ffn_share) + "%"),
        line(DL.t("e.writes"), (r) => r.n_layers + " × 2 = " + r.n_writes),
        // the server's digits: "0.02/√24 ≈ 0.00408248", or the plain std
        line(DL.t("e.initstd"), (r) => initStd(r)),
        line(DL.t("e.norm"), (r) => normName(r) + ", " + r.placement),
        line(DL.t("e.gating"), (r) => (r.ffn === "swiglu" ? "SwiGLU" : "—") + (r.attn_gate ? " + " + DL.t("e.gate") : "")),
        line("q_proj", (r) => int(r.q_proj_in) + " → " + int(r.q_proj_width) + (r.attn_gate ? " = 2 × " + int(r.q_proj_width / 2) : "")),
        line(DL.t("e.params"), (r) => int(r.total_params)), // a count in full, never rounded
      ];
      const box = $("evolution-table");
      box.textContent = "";
      box.append(table(head, body, "evo"));
    }
    source.section("evolution", {}).then((r) => { rows = r; draw(); })
      .catch((e) => { $("evolution-table").textContent = DL.t("e.missing"); showError(e); });
    return { update() {}, relabel: () => rows && draw() };
  };
})();
