// The real-model section's pictures of the stream as a sum of writes, drawn from the
// probe's answer (depthlab/probes/stream_views.py): the token's path on two principal
// components (canvas, each write an arrow head to tail), each write's direct contribution
// to the target's logit (bars, with their sum against the model's own logit), the
// logit-lens grid (a table shaded by probability, top-5 on hover) and every head's
// attention map (a heatmap of the picked head, the layer's heads as small multiples).
// realmodel.js calls DL.rmViews[section](sectionElement, result) after the reading.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  const { h } = DL.kit;
  const C = DL.COLORS;
  const ORANGE = "#ef6c00";
  const GREY = "#757575";
  const shown = (s) => JSON.stringify(s).slice(1, -1); // a newline as \n, not a break
  const name = (n) => (n === "embed" ? DL.t("rm.embed") : n);
  const views = {}; // what was drawn, for the page's tests: DL.realmodel.views()

  // A canvas sized for its box and the screen's pixel ratio; draw(ctx, w, h) paints it.
  function canvas(w, hgt, label) {
    const c = h("canvas", { role: "img", "aria-label": label, tabindex: "0" });
    const r = window.devicePixelRatio || 1;
    c.width = Math.round(w * r);
    c.height = Math.round(hgt * r);
    c.style.width = w + "px"; // the height follows the aspect ratio (CSS height: auto)
    const ctx = c.getContext("2d");
    ctx.scale(r, r);
    return [c, ctx];
  }
  // inline style attributes are refused by the page's CSP; CSSOM properties are not
  const styled = (el, props) => { Object.assign(el.style, props); return el; };
  // a pointer's place in the canvas's own units, also when CSS has shrunk it to fit
  const local = (e, cv) => {
    const rect = cv.getBoundingClientRect();
    const k = parseFloat(cv.style.width) / (rect.width || 1);
    return [(e.clientX - rect.left) * k, (e.clientY - rect.top) * k];
  };
  const tipBox = () => h("p", { class: "readout rmv-tip", "aria-live": "polite" }, "\u00a0");

  function figure(title, ...kids) {
    return h("figure", { class: "pchart rmv-figure" }, h("figcaption", {}, title), ...kids);
  }

  // ---- the token's path through the stream -------------------------------------------
  function path(sec, r, avail) {
    const p = r.path;
    const n = p.x.length;
    const box = h("div", { class: "rmv-path" });
    const width = Math.min(560, Math.max(280, (avail || 600) - 40));
    const height = Math.round(width * 0.62);
    const [cv, ctx] = canvas(width, height, DL.t("rm.path.label", { pos: p.position, n }));
    const tip = tipBox();
    const xs = [p.origin[0]].concat(p.x);
    const ys = [p.origin[1]].concat(p.y);
    const pad = 24;
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    // one scale for both axes: a principal-component plane keeps its distances
    const s = Math.min((width - 2 * pad) / ((x1 - x0) || 1), (height - 2 * pad) / ((y1 - y0) || 1));
    const X = (v) => pad + (v - x0) * s + ((width - 2 * pad) - (x1 - x0) * s) / 2;
    const Y = (v) => height - pad - (v - y0) * s - ((height - 2 * pad) - (y1 - y0) * s) / 2;
    const color = (k) => (k === 0 ? GREY : p.states[k].endsWith("attn") ? C.accent : ORANGE);
    function arrow(ax, ay, bx, by, col, wide) {
      const len = Math.hypot(bx - ax, by - ay);
      ctx.strokeStyle = col;
      ctx.fillStyle = col;
      ctx.lineWidth = wide ? 2.5 : 1.5;
      ctx.beginPath();
      ctx.moveTo(ax, ay);
      ctx.lineTo(bx, by);
      ctx.stroke();
      if (len < 3) return;
      const head = Math.min(8, len / 2);
      const a = Math.atan2(by - ay, bx - ax);
      ctx.beginPath();
      ctx.moveTo(bx, by);
      ctx.lineTo(bx - head * Math.cos(a - 0.4), by - head * Math.sin(a - 0.4));
      ctx.lineTo(bx - head * Math.cos(a + 0.4), by - head * Math.sin(a + 0.4));
      ctx.closePath();
      ctx.fill();
    }
    // the embedding's arrow first (from the zero vector), then each write from the state before
    for (let k = 0; k < n; k++) {
      const [ax, ay] = k === 0 ? [p.origin[0], p.origin[1]] : [p.x[k - 1], p.y[k - 1]];
      arrow(X(ax), Y(ay), X(p.x[k]), Y(p.y[k]), color(k), k === p.longest);
    }
    ctx.fillStyle = "#000";
    ctx.beginPath();
    ctx.arc(X(p.origin[0]), Y(p.origin[1]), 3, 0, 2 * Math.PI);
    ctx.fill();
    ctx.font = "11px sans-serif";
    ctx.fillText("0", X(p.origin[0]) + 5, Y(p.origin[1]) - 5);
    ctx.fillText(name(p.states[n - 1]), X(p.x[n - 1]) + 5, Y(p.y[n - 1]) - 5);
    cv.addEventListener("mousemove", (e) => {
      const [mx, my] = local(e, cv);
      let best = 0;
      for (let k = 1; k < n; k++) {
        if (Math.hypot(X(p.x[k]) - mx, Y(p.y[k]) - my) < Math.hypot(X(p.x[best]) - mx, Y(p.y[best]) - my)) best = k;
      }
      tip.textContent = DL.t("rm.path.hover", { k: best, name: name(p.states[best]), x: DL.fmt(p.x[best], 4), y: DL.fmt(p.y[best], 4) });
    });
    const key = h("p", { class: "note rmv-key" },
      styled(h("span", { class: "rmv-swatch" }), { background: GREY }), DL.t("rm.embed"), " ",
      styled(h("span", { class: "rmv-swatch" }), { background: C.accent }), h("code", {}, "attn"), " ",
      styled(h("span", { class: "rmv-swatch" }), { background: ORANGE }), h("code", {}, "mlp"));
    box.append(cv, tip, key);
    sec.append(h("p", { class: "readout" }, DL.t("rm.path.share", { share: DL.fmt(100 * p.variance_2d, 3) + "%",
      a: DL.fmt(100 * p.variance[0], 3) + "%", b: DL.fmt(100 * p.variance[1], 3) + "%" }),
      p.fit_first_token ? "" : " " + DL.t("rm.path.first")));
    sec.append(h("div", { class: "pcharts" }, figure(DL.t("rm.c.path"), box)));
    views.path = { canvas: cv, points: n };
  }

  // ---- direct logit attribution -------------------------------------------------------
  function dla(sec, r) {
    const d = r.dla;
    if (!d.available) return;
    const text = (i) => (r.lens_grid.text || {})[String(i)];
    const tok = text(d.target_id);
    const terms = d.contribution.length;
    sec.append(h("p", { class: "readout" }, DL.t("rm.dla.target") + " ",
      h("code", {}, tok != null ? JSON.stringify(tok) : "id " + d.target_id),
      " " + DL.t("rm.dla.at", { pos: d.position }) + " · " + DL.t("rm.dla.sum", {
        n: terms, sum: DL.fmt(d.sum, 7), logit: DL.fmt(d.logit, 7), gap: DL.fmt(d.gap, 2), tol: DL.fmt(d.tolerance, 2) })));
    sec.append(h("p", { class: "readout" }, DL.t("rm.dla.top") + " ",
      d.top.map((t) => name(t.term) + " " + (t.value > 0 ? "+" : "") + DL.fmt(t.value, 3)).join(" · ")));
    const el = h("div", { class: "chart", id: "rm-dla" });
    sec.append(h("div", { class: "pcharts rmv-wide" }, figure(DL.t("rm.c.dla"), el)));
    const xs = DL.range(0, terms - 1);
    const series = [{ label: () => DL.t("rm.s.contrib"), color: C.accent, bars: true, width: 1.5, legend: false }];
    DL.charts.make(el, {
      title: () => DL.t("rm.c.dla"), xLabel: () => DL.t("rm.ax.term"), yLabel: () => DL.t("rm.ax.logit"),
      yZero: true, height: 220, xInt: true, xRange: () => [-0.5, terms - 0.5],
      hover: (x, v, k, vs) => DL.t("rm.x.term", { k: x, name: name(d.terms[x]) }) + ": " + series[k].label() + " = " + vs,
      series,
    }).update(xs, [d.contribution]);
  }

  // ---- logit-lens grid -----------------------------------------------------------------
  function grid(sec, r) {
    const g = r.lens_grid;
    const text = (i) => { const s = (g.text || {})[String(i)]; return s != null ? s : "#" + i; };
    const cut = (s) => (s.length > 9 ? s.slice(0, 8) + "…" : s);
    const tip = tipBox();
    const labels = r.tokens || r.prompt_ids.map(String);
    const rowName = (j) => (j === 0 ? DL.t("rm.embed") : DL.t("rm.grid.row", { b: j - 1 }));
    // built as one string (1,600 cells for 52 tokens on SmolLM2's 31 rows): the shade is
    // one of ten classes (the CSP refuses inline styles), the exact value is in the hover
    const esc = (v) => String(v).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
    const top5 = (j, t) => g.top_id[j][t].map((i, m) => JSON.stringify(text(i)) + " " + DL.fmt(g.top_prob[j][t][m], 3));
    // the last position's column is the model's answer: pinned to the right edge (CSS
    // position: sticky), so a narrow screen that scrolls the prompt keeps it in view
    const last = labels.length - 1;
    const pin = (t) => (t === last ? " rmv-answer" : "");
    const html = ["<thead><tr><th scope=\"col\"></th>"];
    labels.forEach((s, t) => html.push("<th scope=\"col\" class=\"" + pin(t) + "\"><sub>" + t + "</sub><code>" + esc(cut(shown(s))) + "</code></th>"));
    html.push("</tr></thead><tbody>");
    g.top_id.forEach((cells, j) => {
      html.push("<tr><th scope=\"row\">" + esc(rowName(j)) + "</th>");
      cells.forEach((ids, t) => {
        const p = g.top_prob[j][t][0];
        html.push("<td data-j=\"" + j + "\" data-t=\"" + t + "\" class=\"rmv-p" + Math.min(9, Math.floor(10 * p)) + pin(t) +
          "\" title=\"" + esc(top5(j, t).join("\n")) + "\"><code>" + esc(cut(shown(text(ids[0])))) + "</code></td>");
      });
      html.push("</tr>");
    });
    html.push("</tbody>");
    const table = h("table", { class: "rmv-grid" });
    table.innerHTML = html.join("");
    table.addEventListener("mouseover", (e) => {
      const td = e.target.closest("td");
      if (!td) return;
      const j = +td.dataset.j, t = +td.dataset.t;
      tip.textContent = DL.t("rm.grid.hover", { row: rowName(j), pos: t }) + top5(j, t).join(" · ");
    });
    sec.append(h("div", { class: "pcharts rmv-wide" }, figure(DL.t("rm.c.grid"), tip, h("div", { class: "rmv-scroll" }, table))));
    views.grid = { rows: g.top_id.length, cols: labels.length, table };
  }

  // ---- attention maps --------------------------------------------------------------------
  // One map as a T x T image (white -> dark blue, linear in the weight), scaled up with
  // no smoothing: one putImageData and one drawImage per map, whatever T is.
  function heat(ctx, map, size, x0, y0) {
    const T = map.length;
    const img = new ImageData(T, T);
    for (let q = 0; q < T; q++) {
      for (let k = 0; k < T; k++) {
        const v = k < map[q].length ? map[q][k] / 1000 : 0;
        const o = 4 * (q * T + k);
        const blank = k > q; // a later key: no attention possible
        img.data[o] = blank ? 250 : Math.round(255 - 234 * v);
        img.data[o + 1] = blank ? 250 : Math.round(255 - 154 * v);
        img.data[o + 2] = blank ? 250 : Math.round(255 - 63 * v);
        img.data[o + 3] = 255;
      }
    }
    const tmp = document.createElement("canvas");
    tmp.width = T;
    tmp.height = T;
    tmp.getContext("2d").putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(tmp, x0, y0, size, size);
  }

  function maps(sec, r, avail) {
    const a = r.attention_maps;
    const dn = r.deltanet_mixing; // a hybrid's Gated DeltaNet layers: no softmax weights to draw
    if (dn) sec.append(h("p", { class: "note", id: "rm-maps-deltanet" }, DL.t("rm.maps.deltanet", { layers: dn.layers.join(", ") })));
    if (!a) return;
    if (!a.maps) {
      sec.append(h("p", { class: "note" }, DL.t("rm.maps.long", { n: a.max_tokens, t: a.n_tokens })));
      return;
    }
    const L = a.maps.length, H = a.maps[0].length, T = a.n_tokens;
    const share = r.attention.first_token_share;
    // start at the head that gives the first token the most, as the reading says
    let pick = [0, 0];
    share.forEach((row, l) => row.forEach((v, hd) => { if (v > share[pick[0]][pick[1]]) pick = [l, hd]; }));
    const labels = r.tokens || r.prompt_ids.map(String);
    if (a.kv_heads < H) sec.append(h("p", { class: "note" }, DL.t("rm.maps.kv", { h: H, k: a.kv_heads })));
    const block = (l) => (a.layers ? a.layers[l] : l); // map l belongs to this block
    const layerSel = h("select", { id: "rm-map-layer" }, DL.range(0, L - 1).map((l) => h("option", { value: l }, String(block(l)))));
    const big = h("div", { class: "rmv-map" });
    const small = h("div", { class: "rmv-heads", role: "group" });
    const tip = tipBox();
    const caption = h("figcaption", {});
    const fig = h("figure", { class: "pchart rmv-figure" }, caption,
      h("label", { class: "rmv-layer" }, DL.t("rm.maps.layer") + " ", layerSel), big, tip,
      h("p", { class: "note" }, DL.t("rm.maps.heads")), small);
    sec.append(h("div", { class: "pcharts rmv-wide" }, fig));
    const size = Math.min(420, Math.max(220, (avail || 600) - 80));
    const gutter = T <= 40 ? 64 : 0; // token labels beside the rows when they fit
    function show(l, hd) {
      pick = [l, hd];
      layerSel.value = String(l);
      caption.textContent = DL.t("rm.c.maps", { l: block(l), h: hd });
      const [cv, ctx] = canvas(size + gutter, size + (gutter ? 14 : 0), DL.t("rm.maps.label", { l: block(l), h: hd, t: T }));
      heat(ctx, a.maps[l][hd], size, gutter, gutter ? 14 : 0);
      const cell = size / T;
      if (gutter && cell >= 8) {
        ctx.fillStyle = "#333";
        ctx.font = Math.min(11, cell - 1) + "px sans-serif";
        ctx.textBaseline = "middle";
        labels.forEach((s, q) => ctx.fillText(shown(s).slice(0, 8), 2, 14 + (q + 0.5) * cell));
        ctx.textBaseline = "alphabetic";
        ctx.fillText("0", gutter + cell / 2 - 3, 11); // the first key's column, where a sink shows
      }
      cv.addEventListener("mousemove", (e) => {
        const [mx, my] = local(e, cv);
        const k = Math.floor((mx - gutter) / cell);
        const q = Math.floor((my - (gutter ? 14 : 0)) / cell);
        if (q < 0 || q >= T || k < 0 || k > q) { tip.textContent = "\u00a0"; return; }
        tip.textContent = DL.t("rm.maps.hover", { q: q + " " + JSON.stringify(labels[q]), k: k + " " + JSON.stringify(labels[k]),
          v: DL.fmt(a.maps[l][hd][q][k] / 1000, 3) });
      });
      big.textContent = "";
      big.append(cv);
      small.textContent = "";
      for (let i = 0; i < H; i++) {
        const [c, cx] = canvas(64, 64, DL.t("rm.maps.label", { l: block(l), h: i, t: T }));
        heat(cx, a.maps[l][i], 64, 0, 0);
        const b = h("button", { type: "button", class: "rmv-head" + (i === hd ? " on" : ""), "aria-pressed": String(i === hd),
          onclick: () => show(l, i) }, c, h("span", {}, DL.t("rm.maps.head", { h: i })));
        small.append(b);
      }
      views.maps = { layer: l, head: hd, canvas: cv, heads: H };
    }
    layerSel.addEventListener("change", () => show(+layerSel.value, pick[1]));
    show(pick[0], pick[1]);
  }

  DL.rmViews = { path, dla, grid, maps, drawn: () => views,
                 reset: () => Object.keys(views).forEach((k) => delete views[k]) };
})();
