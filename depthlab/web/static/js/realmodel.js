// The real-model section: the field's probes (depthlab/probes/realmodel.py) of one run on
// one prompt, from POST api/realmodel/probe, which computes a (run, prompt, target) once
// and then reads it from its disk cache; a static copy holds the shipped prompts on one
// run. Charts in the lesson's order, each under its question with the API's one-line
// reading; the run, the prompt and the lens target live in the URL.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  DL.figures = DL.figures || {};
  const { $, h, t, range } = DL.kit;
  const C = DL.COLORS;
  const GREY = "#9e9e9e";

  // x of a chart -> words for the hover read-out: a stream state, a write, a layer.
  // a state's label from the probe: "embed", then "3.attn" / "3.mlp" (block 3's two writes)
  const label = (name) => (name === "embed" ? DL.t("rm.embed") : name);
  const stateName = (r, x) => DL.t("rm.x.state", { k: x, name: label(r.stream.states[x]) });
  const writeName = (r, x) => DL.t("rm.x.write", { k: x, name: label(r.stream.states[x]) });
  const layerName = (r, x) => DL.t("rm.x.layer", { l: x });

  // Each chart: the section it belongs to, its labels, series and how to read them from a result.
  const CHARTS = [
    { section: "stream", id: "rm-rms", title: "rm.c.rms", x: "rm.ax.state", y: "rm.ax.rms", yLog: true, at: stateName,
      series: [["rm.s.all", C.accent], ["rm.s.first", C.plain], ["rm.s.others", C.improved], ["rm.s.sqrt", C.theory, true]],
      data: (r) => [range(0, r.stream.rms.length - 1),
                    [r.stream.rms, r.stream.rms_first_token, r.stream.rms_other_tokens, r.stream.rms_expected]] },
    { section: "stream", id: "rm-write", title: "rm.c.write", x: "rm.ax.write", y: "rm.ax.ratio", yLog: true, at: writeName,
      series: [["rm.s.write", C.accent]],
      data: (r) => [range(1, r.stream.write_ratio.length), [r.stream.write_ratio]] },
    { section: "stream", id: "rm-angle", title: "rm.c.angle", x: "rm.ax.write", y: "rm.ax.angle", at: writeName,
      series: [["rm.s.all", C.accent], ["rm.s.others", C.improved, true]],
      data: (r) => [range(1, r.stream.angular_distance.length),
                    [r.stream.angular_distance, r.stream.angular_distance_other_tokens]] },
    { section: "attention", id: "rm-attn", title: "rm.c.attn", x: "rm.ax.layer", y: "rm.ax.share", at: layerName,
      yRange: () => [0, 1],
      series: (r) => [["rm.s.layer", C.accent, false, "bars"], ["rm.s.uniform", C.theory, true], [() => DL.t("rm.s.threshold", { th: r.attention.threshold }), C.plain, true]]
        .concat(r.attention.first_token_share[0].map((_, i) => [() => DL.t("rm.s.head", { i }), "#37474f", false, "dots",
                                                                i > 0, t("rm.s.heads")])),
      data: (r) => {
        const a = r.attention;
        const L = a.layer_share.length; // a hybrid's attention layers only: their block numbers
        return [a.layers || range(0, L - 1), [a.layer_share, Array(L).fill(a.uniform), Array(L).fill(a.threshold)]
          .concat(a.first_token_share[0].map((_, i) => a.first_token_share.map((row) => row[i])))];
      } },
    { section: "massive", id: "rm-massive", title: "rm.c.massive", x: "rm.ax.state", y: "rm.ax.abs", yLog: true, at: stateName,
      series: [["rm.s.max", C.plain], ["rm.s.median", C.theory, true]],
      data: (r) => [range(0, r.massive.max_abs.length - 1), [r.massive.max_abs, r.massive.median_abs]],
      extra: (r, x, k) => (k === 0 ? " · " + DL.t("rm.at", { dim: r.massive.dim[x], tok: r.massive.token[x] }) +
        (r.tokens ? " " + JSON.stringify(r.tokens[r.massive.token[x]]) : "") : "") },
    { section: "collapse", id: "rm-collapse", title: "rm.c.collapse", x: "rm.ax.state", y: "rm.ax.cos", at: stateName,
      series: [["rm.s.cos", C.accent], ["rm.s.cos_others", C.improved, true], ["rm.s.dist", C.theory]],
      data: (r) => [range(0, r.stream.mean_cosine.length - 1),
                    [r.stream.mean_cosine, r.stream.mean_cosine_other_tokens, r.stream.rel_distance]] },
    { section: "gradient", id: "rm-grad", title: "rm.c.grad", x: "rm.ax.sublayer", y: "rm.ax.grad", yLog: true,
      at: (r, x) => DL.t("rm.x.sublayer", { k: x, name: r.sublayers[x - 1] }),
      series: [["rm.s.grad", C.accent, false, "bars"]],
      data: (r) => [range(1, r.grad_norm.length), [r.grad_norm]] },
    { section: "lens", id: "rm-rank", title: "rm.c.rank", x: "rm.ax.state", y: "rm.ax.rank", yLog: true, yMin: 1, at: stateName,
      series: [["rm.s.rank", C.accent]],
      data: (r) => [range(0, r.lens.rank.length - 1), [r.lens.rank.map((v) => v + 1)]] },
    { section: "lens", id: "rm-prob", title: "rm.c.prob", x: "rm.ax.state", y: "rm.ax.prob", yLog: true, at: stateName,
      series: [["rm.s.prob", C.improved]],
      data: (r) => [range(0, r.lens.prob.length - 1), [r.lens.prob]] },
    { section: "lens", id: "rm-entropy", title: "rm.c.entropy", x: "rm.ax.state", y: "rm.ax.entropy", at: stateName,
      series: [["rm.s.entropy", C.accent], ["rm.s.cached", C.plain, true]],
      data: (r) => [range(0, r.lens.entropy.length - 1), [r.lens.entropy, r.lens.entropy_cached_scale]] },
    { section: "ablation", id: "rm-ablation", title: "rm.c.ablation", x: "rm.ax.layer", y: "rm.ax.delta", at: layerName, yZero: true,
      series: [["rm.s.delta", C.plain, false, "bars"]],
      data: (r) => [range(0, r.ablation.delta_loss.length - 1), [r.ablation.delta_loss]] },
  ];

  // A reading from the API in the page's language, with the tokens it quotes (' Paris')
  // set as code: its "parts" alternate prose and token (odd items), so no apostrophe in
  // the prose is ever taken for a quote. A reading without parts is all prose.
  function withTokens(reading) {
    const parts = reading && reading.parts ? reading.parts[DL.lang()] || reading.parts.en : [DL.tr(reading)];
    return parts.map((part, i) => (i % 2 ? h("code", {}, part) : part));
  }

  // A template whose fields in `codes` are set as <code> (token text, a run's name), so
  // that data stays apart from the sentence around it.
  function withCode(key, plain, codes) {
    const names = Object.keys(codes);
    const marks = Object.fromEntries(names.map((k, i) => [k, "\u0000" + i + "\u0000"]));
    return DL.t(key, Object.assign({}, plain, marks)).split("\u0000")
      .map((part, i) => (i % 2 ? h("code", {}, codes[names[+part]]) : part));
  }

  DL.figures.realmodel = function (source, showError) {
    const runSel = $("rm-run");
    const promptSel = $("rm-prompt");
    const text = $("rm-text");
    const target = $("rm-target");
    const status = $("rm-status");
    const errBox = $("rm-error");
    const body = $("rm-body");
    let runs = [];
    let prompts = null; // the shipped prompts, each marked readable or not by the run in `promptsRun`
    let promptsRun = null;
    let result = null;
    let want = null; // the request on screen (or on its way)
    let ticker = null;
    DL.realmodel = { result: () => result, request: () => want, busy: false, views: () => DL.rmViews.drawn(), receivedAt: null };

    const fail = (msg) => {
      errBox.textContent = msg ? DL.t("err.with", { what: DL.t("err"), message: msg }) : "";
      errBox.style.display = msg ? "block" : "none";
    };

    function fillRuns() {
      runSel.textContent = "";
      runs.forEach((r) => runSel.append(h("option", { value: r.name },
        r.name + " · " + DL.t("rm.kind." + r.kind) + DL.t("b.d.sep") + DL.tn("rm.layers", r.n_layers))));
    }
    function fillPrompts() {
      promptSel.textContent = "";
      // each prompt marked with its language: an English prompt in the zh view is data, not a stray word
      prompts.prompts.forEach((p) => {
        const o = h("option", { value: p.id, lang: p.lang }, "[" + p.lang + "] " + (p.text.length > 48 ? p.text.slice(0, 47) + "…" : p.text));
        o.disabled = p.readable === false; // this run's tokenizer cannot read it (or a static copy lacks it)
        promptSel.append(o);
      });
      if (source.kind === "live") promptSel.append(h("option", { value: "" }, DL.t("rm.own")));
    }

    // The shipped prompt a state picks: by id, or with neither an id nor typed text, the
    // first one in the page's language that the run can read (a course model's character
    // vocabulary has no Chinese).
    function shippedOf(st) {
      const named = prompts.prompts.find((p) => p.id === st.rp);
      if (named || st.rtext.trim()) return named || null;
      const order = prompts.prompts.filter((p) => p.lang === DL.lang()).concat(prompts.prompts.filter((p) => p.lang !== DL.lang()));
      return order.find((p) => p.readable !== false) || order[0];
    }
    const runOf = (st) => (runs.some((r) => r.name === st.rrun) ? st.rrun
      // by default the imported real model (what `depthlab lab` puts in runs/smollm2)
      : (runs.find((r) => r.name === "smollm2") || runs.find((r) => r.kind !== "trained") || runs[0]).name);

    // The request a state asks for: {run, prompt, target}, or null while there is nothing to ask.
    function requestOf(st) {
      if (!runs.length || !prompts) return null;
      const run = runOf(st);
      const shipped = shippedOf(st);
      const prompt = shipped ? shipped.text : st.rtext.trim();
      if (!prompt) return null;
      const tgt = st.rtgt || (shipped && shipped.target) || null;
      return { run, prompt, target: tgt };
    }

    function controls(st, req) {
      if (req) runSel.value = req.run;
      const shipped = prompts && shippedOf(st);
      promptSel.value = shipped ? shipped.id : "";
      if (shipped) text.lang = shipped.lang;
      else text.removeAttribute("lang"); // typed text: the reader's own
      if (document.activeElement !== text) text.value = shipped ? shipped.text : st.rtext;
      text.readOnly = !!shipped || source.kind !== "live";
      if (document.activeElement !== target) target.value = st.rtgt;
      target.readOnly = source.kind !== "live";
    }

    function busy(on) {
      clearInterval(ticker);
      DL.realmodel.busy = on;
      body.setAttribute("aria-busy", String(on));
      $("rm-go").disabled = on;
      if (!on) return;
      const t0 = performance.now();
      const tick = () => { status.textContent = DL.t("rm.busy", { s: Math.round((performance.now() - t0) / 1000) }); };
      tick();
      ticker = setInterval(tick, 1000);
    }

    function probe(req) {
      const key = JSON.stringify(req);
      if (want && JSON.stringify(want) === key && (result || DL.realmodel.busy)) return;
      want = req;
      fail("");
      busy(true);
      drawing++; // a draw still under way is of the last answer: stopped
      const t0 = performance.now();
      source.realmodelProbe(req).then((r) => {
        if (JSON.stringify(want) !== key) return; // a newer request took its place
        busy(false);
        const ms = Math.round(performance.now() - t0);
        status.textContent = source.kind === "static" ? DL.t("rm.done.static")
          : r.cached ? DL.t("rm.done.cached", { ms }) : DL.t("rm.done.computed", { s: (ms / 1000).toFixed(1) });
        result = r;
        DL.realmodel.receivedAt = performance.now(); // for bench/realmodel_long_tasks.py
        draw();
      }).catch((e) => {
        if (JSON.stringify(want) !== key) return;
        busy(false);
        status.textContent = "";
        if (source.kind === "static") fail(DL.t("rm.static.missing"));
        else fail(e.message);
        result = null;
        body.textContent = "";
      });
    }

    // Each section is drawn in a task of its own, so no task after the data arrive holds the
    // page for long; DL.realmodel.busy stays true until the last one is drawn. A newer draw
    // or request (`drawing` moves on) stops an older draw between sections.
    let drawing = 0;
    function draw() {
      const gen = ++drawing;
      const r = result.result;
      const q = result.questions;
      body.textContent = "";
      DL.rmViews.reset();
      DL.realmodel.busy = true;
      body.setAttribute("aria-busy", "true");
      const shown = (s) => JSON.stringify(s).slice(1, -1); // a newline as \n, not a break
      // the prompt as text: one piece per character run (a character the byte-level
      // tokenizer split is shown once), each numbered by its first token
      body.append(h("p", { class: "kv small" }, DL.t("rm.tokens", { n: r.n_tokens }) + " ",
        r.token_pieces ? r.token_pieces.map((p) => h("span", { class: "tokpos" }, h("sub", {}, String(p.start)),
          h("code", { class: "tok", title: DL.t(p.stop - p.start > 1 ? "rm.tok.many" : "rm.tok.one",
            { a: p.start, b: p.stop - 1, parts: p.parts.map((x) => JSON.stringify(x)).join(" + ") }) }, shown(p.text)), " "))
          : r.prompt_ids.join(", "),
        " · " + DL.t("rm.loss", { n: r.n_tokens - 1, last: r.n_tokens - 1 }) + " " + DL.fmt(r.loss, 4)));
      const names = Object.keys(q); // the sections in the server's order
      const next = () => {
        if (gen !== drawing) return;
        if (!names.length) {
          DL.realmodel.busy = false;
          body.setAttribute("aria-busy", "false");
          return;
        }
        const name = names.shift();
        performance.mark("rm:" + name); // each section's task, named (bench/realmodel_long_tasks.py)
        section(name);
        performance.measure("rm:" + name, "rm:" + name);
        setTimeout(next, 0);
      };
      next();

      function section(name) {
        const sec = h("div", { class: "rm-section", id: "rm-sec-" + name });
        sec.append(h("h3", {}, DL.tr(q[name])));
        sec.append(h("p", { class: "reading" }, withTokens(result.readings[name])));
        if (name === "attention" && r.attention) {
          const a = r.attention;
          sec.append(h("p", { class: "readout" }, DL.t("rm.heads", { n: a.n_heads_above, total: a.first_token_share.flat().length,
            pct: DL.fmt(100 * a.heads_above, 3) + "%", th: a.threshold, u: DL.fmt(a.uniform, 3) })));
        }
        if (name === "massive") {
          const m = r.massive.largest;
          sec.append(h("p", { class: "readout" }, DL.t("rm.largest", { v: DL.fmt(m.value, 4), state: label(m.state), dim: m.dim, tok: m.token }),
            r.tokens ? [" ", h("code", {}, JSON.stringify(r.tokens[m.token]))] : "",
            " · " + DL.t("rm.ratio", { x: DL.fmt(m.ratio, 3) })));
        }
        if (name === "lens") {
          const lens = r.lens;
          const typed = lens.typed; // a typed target as it tokenises: the lens scores its first token
          const q = (s) => JSON.stringify(s);
          sec.append(h("p", { class: "readout" }, DL.t("rm.target"), " ",
            h("code", {}, q(lens.target != null ? lens.target : lens.target_id)),
            " (id " + lens.target_id + ")",
            typed ? [" · "].concat(typed.ids.length === 1 ? withCode("rm.lens.one", { id: typed.ids[0] }, { text: q(typed.text) })
              : withCode("rm.lens.many", { n: typed.ids.length },
                { text: q(typed.text), pieces: typed.pieces.map((p) => q(p.text)).join(" "), first: q(lens.target) })) : "",
            " · " + DL.t("rm.top1"), " ",
            h("code", {}, q(lens.top ? lens.top[lens.top.length - 1] : lens.top_id[lens.top_id.length - 1])),
            " · " + DL.t("rm.lens.pos", { pos: r.n_tokens - 1 })));
        }
        // the stream as a sum of writes: its path, the writes' shares, the lens grid, the maps
        if (DL.rmViews[name]) DL.rmViews[name](sec, r, body.clientWidth);
        const grid = h("div", { class: "pcharts" });
        sec.append(grid);
        body.append(sec);
        // a model without softmax attention (every layer Gated DeltaNet) has no attention chart
        for (const c of CHARTS.filter((c) => c.section === name && (name !== "attention" || r.attention))) {
          const el = h("div", { class: "chart", id: c.id });
          grid.append(h("figure", { class: "pchart" }, h("figcaption", {}, DL.t(c.title)), el));
          const [xs, ys] = c.data(r);
          const series = (typeof c.series === "function" ? c.series(r) : c.series).map(([label, color, dash, kind, nokey, key]) =>
            ({ label: typeof label === "function" ? label : t(label), key, color, dash: !!dash, width: 1.5,
               bars: kind === "bars", dots: kind === "dots", legend: !nokey, points: !kind && !dash && xs.length <= 32 }));
          DL.charts.make(el, {
            title: t(c.title), xLabel: t(c.x), yLabel: t(c.y), yLog: !!c.yLog, yRange: c.yRange, yZero: !!c.yZero, yMin: c.yMin, height: 200, xInt: true,
            // half a step either side, so that the edge bars (and a one-layer model's only bar) show whole
            xRange: () => [xs[0] - 0.5, xs[xs.length - 1] + 0.5],
            hover: (x, v, k, vs) => DL.t("rm.hover", { at: c.at(r, x), label: series[k].label(), v: vs }) + (c.extra ? c.extra(r, x, k) : ""),
            series,
          }).update(xs, ys);
        }
      }
    }

    function note() {
      const box = $("rm-note");
      box.textContent = "";
      if (!runs.length) {
        box.append(DL.t(source.kind === "static" ? "rm.static.none" : "rm.noruns") + " ",
                   source.kind === "static" ? h("code", {}, "depthlab serve") : h("code", {}, "depthlab lab"));
      } else if (source.kind === "static") {
        box.append(DL.t("rm.static", { run: runs[0].name }) + " ", h("code", {}, "depthlab serve"));
      }
    }

    // The zh view of a run trained mostly on English (SmolLM2): said, with a run trained on
    // Chinese (the course model on 红楼梦) to switch to when the run list has one.
    function langNote(st) {
      const box = $("rm-lang");
      box.textContent = "";
      const cur = runs.find((r) => r.name === runOf(st));
      if (DL.lang() !== "zh" || !cur || cur.trained_on !== "en") return;
      box.append(...withCode("rm.zh.english", {}, { run: cur.name }), " ");
      if (source.kind !== "live") return; // a static copy holds one run
      const zh = runs.filter((r) => r.trained_on === "zh");
      if (zh.length) {
        box.append(DL.t("rm.zh.offer") + " ", ...zh.flatMap((r) => [h("button", { type: "button", class: "rm-pick",
          onclick: () => DL.state.set({ rrun: r.name, rp: "" }) }, DL.t("rm.zh.pick") + " ", h("code", {}, r.name)), " "]));
      } else {
        box.append(DL.t("rm.zh.none") + " ", h("code", {}, "depthlab train --preset course --corpus hongloumeng --tokenizer bpe --out runs/hlm"));
      }
    }

    function update(st) {
      if (!runs.length) return;
      langNote(st);
      const run = runOf(st);
      if (promptsRun !== run) { // the prompts as this run reads them, then the rest
        promptsRun = run;
        source.realmodelPrompts(run).then((ps) => {
          if (promptsRun !== run) return;
          prompts = ps;
          text.maxLength = ps.max_prompt_chars;
          fillPrompts();
          update(DL.state.get());
        }).catch((e) => { fail(e.message); showError(e); });
        return;
      }
      if (!prompts) return;
      const req = requestOf(st);
      controls(st, req);
      if (req) probe(req);
    }

    runSel.addEventListener("change", () => DL.state.set({ rrun: runSel.value }));
    promptSel.addEventListener("change", () => DL.state.set(promptSel.value ? { rp: promptSel.value, rtgt: "" }
      : { rp: "", rtext: text.value }));
    // the target is sent verbatim: " cold" (with its space) and "cold" are different tokens
    const go = () => DL.state.set({ rp: "", rtext: text.value, rtgt: target.value });
    $("rm-go").addEventListener("click", () => {
      // a shipped prompt with a new target keeps its text; a typed one is sent as typed
      if (promptSel.value) DL.state.set({ rtgt: target.value });
      else go();
    });
    text.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) go(); });
    target.addEventListener("keydown", (e) => { if (e.key === "Enter") $("rm-go").click(); });
    text.addEventListener("input", () => { if (promptSel.value && !text.readOnly) promptSel.value = ""; });

    const ready = source.realmodelRuns().then((rs) => {
      runs = rs;
      fillRuns();
      note();
      if (source.kind !== "live") $("rm-go").hidden = true;
      update(DL.state.get());
    }).catch((e) => { fail(e.message); showError(e); });

    return {
      update: (st) => ready.then(() => update(st)),
      relabel() {
        const v = runSel.value;
        fillRuns();
        runSel.value = v;
        if (prompts) fillPrompts();
        note();
        if (result) draw();
        update(DL.state.get()); // the default prompt follows the language
      },
    };
  };
})();
