"""The page's real-model section and the project charts' seed-spread bands, in a browser.

Every real-model chart must hold exactly the numbers of the probe (the API's answer for
the run and prompt in the URL), under the API's question and reading; the run picker
lists every run the API lists; a typed prompt is sent as typed, shows "computing…"
while it is computed, lands in the URL and comes back from the cache; a prompt the
run cannot read is refused in words on the page. The static export shows the shipped
prompts on one run from its embedded data and says that anything else needs the
server. The project's depth chart draws the export's lo/hi band on an integer x axis.
A slow test does the same on SmolLM2 when `depthlab lab` has imported it."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
from page_harness import BROWSER_MARKS, REALMODEL_SETTLED, Watch, serve

from depthlab.web.realmodel import PROMPTS, SECTIONS, ProbeRequest, RealModelProbes, list_runs

pytestmark = BROWSER_MARKS
SMOLLM2 = Path(__file__).resolve().parent.parent / "runs" / "smollm2"


def _range(a: int, b: int) -> list[int]:
    return list(range(a, b + 1))


# chart id -> (xs, ys) from a probe result, as the section must draw them
def expected_charts(r: dict) -> dict[str, tuple[list, list]]:
    s, a, m, lens = r["stream"], r["attention"], r["massive"], r["lens"]
    n_states, n_writes, n_layers = len(s["rms"]), len(s["write_ratio"]), len(a["layer_share"])
    blocks = r["n_layers"]  # a hybrid's attention rows are its attention layers only
    heads = [[row[i] for row in a["first_token_share"]] for i in range(len(a["first_token_share"][0]))]
    return {
        "rm-rms": (_range(0, n_states - 1), [s["rms"], s["rms_first_token"], s["rms_other_tokens"], s["rms_expected"]]),
        "rm-write": (_range(1, n_writes), [s["write_ratio"]]),
        "rm-angle": (_range(1, n_writes), [s["angular_distance"], s["angular_distance_other_tokens"]]),
        "rm-attn": (a["layers"], [a["layer_share"], [a["uniform"]] * n_layers, [a["threshold"]] * n_layers, *heads]),
        "rm-massive": (_range(0, n_states - 1), [m["max_abs"], m["median_abs"]]),
        "rm-collapse": (_range(0, n_states - 1), [s["mean_cosine"], s["mean_cosine_other_tokens"], s["rel_distance"]]),
        "rm-grad": (_range(1, len(r["grad_norm"])), [r["grad_norm"]]),
        "rm-rank": (_range(0, n_states - 1), [[v + 1 for v in lens["rank"]]]),
        "rm-prob": (_range(0, n_states - 1), [lens["prob"]]),
        "rm-entropy": (_range(0, n_states - 1), [lens["entropy"], lens["entropy_cached_scale"]]),
        "rm-ablation": (_range(0, blocks - 1), [r["ablation"]["delta_loss"]]),
        **({"rm-dla": (_range(0, 2 * blocks), [r["dla"]["contribution"]])} if r["dla"]["available"] else {}),
    }


# What the stream's views drew (realmodel_views.js): pixels that are neither blank nor the
# heatmap's near-white floor, the grid's cell texts, the map picked.
VIEWS = """() => {
  const v = DL.realmodel.views();
  const ink = (c) => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && d[i] + d[i + 1] + d[i + 2] < 690) n++; return n; };
  return {
    path: v.path ? { points: v.path.points, ink: ink(v.path.canvas) } : null,
    grid: v.grid ? [...v.grid.table.querySelectorAll('tbody tr')].map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)) : null,
    maps: v.maps ? { layer: v.maps.layer, head: v.maps.head, ink: ink(v.maps.canvas),
      small: [...document.querySelectorAll('#rm-sec-maps .rmv-head canvas')].map(ink) } : null,
  };
}"""


def _cut(text: str) -> str:
    s = json.dumps(text, ensure_ascii=False)[1:-1]
    return s if len(s) <= 9 else s[:8] + "…"


def check_views(page, r: dict) -> list[str]:
    """The stream's path, the lens grid and the attention maps drawn from the probe `r`."""
    bad = []
    v = page.evaluate(VIEWS)
    if not v["path"] or v["path"]["points"] != len(r["path"]["x"]) or v["path"]["ink"] < 50:
        bad.append(f"path: {v['path']}")
    g = r["lens_grid"]
    text = lambda i: g["text"][str(i)] if "text" in g else f"#{i}"
    want = [[_cut(text(cell[0])) for cell in row] for row in g["top_id"]]
    if v["grid"] != want:
        bad.append("grid: does not hold the lens's top-1 tokens")
    a, share = r["attention_maps"], r["attention"]["first_token_share"]
    if a["maps"] is None:
        if v["maps"] is not None or str(a["max_tokens"]) not in page.inner_text("#rm-sec-maps"):
            bad.append("maps: a long prompt without its note")
    else:
        best = max(((i, j) for i in range(len(share)) for j in range(len(share[i]))), key=lambda ij: share[ij[0]][ij[1]])
        m = v["maps"]
        if not m or (m["layer"], m["head"]) != best or m["ink"] < 20:
            bad.append(f"maps: {m and {k: m[k] for k in ('layer', 'head', 'ink')}} (want {best})")
        elif len(m["small"]) != len(share[0]) or min(m["small"]) == 0:
            bad.append(f"maps: small multiples {m['small']}")
    return bad


def check_section(page, body: dict, lang: str = "en") -> list[str]:
    """What is wrong with the drawn section for the probe answer `body` (empty: nothing)."""
    bad = []
    charts = page.evaluate("() => DL.charts.all()")
    for cid, (xs, ys) in expected_charts(body["result"]).items():
        c = charts.get(cid)
        if c is None:
            bad.append(f"{cid}: not drawn")
            continue
        if json.loads(json.dumps(c["xs"])) != xs or c["ys"] != json.loads(json.dumps(ys)):
            bad.append(f"{cid}: does not hold the probe's numbers")
        if c["error"] or not c["draws"]:
            bad.append(f"{cid}: error {c['error']}, {c['draws']} draws")
        if not c["yScale"] or not all(map(lambda v: v is not None, c["yScale"])) or not c["yScale"][1] > c["yScale"][0]:
            bad.append(f"{cid}: y scale {c['yScale']}")
        # two labelled ticks on each axis (one on x for a one-layer model's one bar)
        if len([t for t in c["yTicks"] if t[1]]) < 2 or len([t for t in c["xTicks"] if t[1]]) < min(2, len(xs)):
            bad.append(f"{cid}: too few labelled ticks {c['xTicks']} {c['yTicks']}")
        if any(float(t[0]) != int(t[0]) for t in c["xTicks"] if t[1]):
            bad.append(f"{cid}: a tick between layers/states {c['xTicks']}")
        if not c["label"] or len(c["label"]) < 20:
            bad.append(f"{cid}: no text alternative")
    ab = charts.get("rm-ablation")
    if ab and ab["yScale"] and not ab["yScale"][0] <= 0 <= ab["yScale"][1]:
        bad.append(f"rm-ablation: the bars' zero is off the axis {ab['yScale']}")
    r = body["result"]
    if r.get("token_pieces") is not None:  # the prompt as text, one piece per character run
        shown = page.eval_on_selector_all("#rm-body code.tok", "els => els.map((e) => e.textContent)")
        if shown != [json.dumps(p["text"], ensure_ascii=False)[1:-1] for p in r["token_pieces"]]:
            bad.append(f"tokens shown {shown}")
    seen = page.inner_text("#realmodel") + "".join(
        page.eval_on_selector_all("#realmodel [title]", "els => els.map((e) => e.title)"))
    if "\ufffd" in seen:
        bad.append("a replacement character '\ufffd' on the page")
    for name in SECTIONS:
        sec = page.locator(f"#rm-sec-{name}")
        if sec.locator("h3").inner_text() != body["questions"][name][lang]:
            bad.append(f"{name}: question")
        if sec.locator(".reading").inner_text() != body["readings"][name][lang]:
            bad.append(f"{name}: reading {sec.locator('.reading').inner_text()!r}")
        bad += check_reading_code(sec, body["readings"][name], lang, name)
    return bad + check_views(page, r)


def check_reading_code(sec, reading: dict, lang: str, name: str) -> list[str]:
    """The reading's code spans are exactly the tokens its parts keep apart (none for a
    reading without tokens): an apostrophe in the prose ("layer's") opens no code span."""
    want = reading["parts"][lang][1::2] if "parts" in reading else []
    shown = sec.locator(".reading code").all_inner_texts()
    return [] if shown == want else [f"{name}: code spans {shown}, want the tokens {want}"]


def probe(runs: Path, run: str, prompt: str, target: str | None = None) -> dict:
    """The API's answer, in-process (the same disk cache the server reads)."""
    return RealModelProbes(runs, threading.Lock()).probe(ProbeRequest(run=run, prompt=prompt, target=target))


def open_section(browser, url: str, width: int = 1400):
    page = browser.new_page(viewport={"width": width, "height": 900}, locale="en-US")
    watch = Watch(page)
    page.goto(url)
    page.wait_for_function("() => window.DL && DL.ready", timeout=20000)
    page.wait_for_function(REALMODEL_SETTLED, timeout=60000)
    return page, watch


def test_every_chart_holds_the_probe_of_the_run_in_the_url(runs, live, browser):
    names = [r["name"] for r in list_runs(runs)]
    run = names[-1]
    page, watch = open_section(browser, live + f"#lang=en&rrun={run}")
    assert [o for o in page.eval_on_selector_all("#rm-run option", "os => os.map(o => o.value)")] == names
    assert page.input_value("#rm-run") == run
    shown = page.evaluate("() => DL.realmodel.request()")
    assert shown["run"] == run and shown["prompt"] == PROMPTS[0]["text"]  # the first English prompt
    body = probe(runs, run, PROMPTS[0]["text"], PROMPTS[0]["target"])
    assert check_section(page, body) == []
    # prompts the run cannot read (no Chinese in a character vocabulary of Shakespeare, or
    # more than 128 characters) cannot be picked
    disabled = page.eval_on_selector_all("#rm-prompt option", "os => os.filter(o => o.disabled).map(o => o.value)")
    readable = RealModelProbes(runs, threading.Lock()).readable(run)
    assert disabled == [i for i, ok in readable.items() if not ok]
    assert {p["id"] for p in PROMPTS if p["lang"] == "zh"} <= set(disabled)
    # another run from the picker: its probe, and the URL says which
    page.select_option("#rm-run", names[0])
    page.wait_for_function(f"() => DL.realmodel.result() && DL.realmodel.result().run === {json.dumps(names[0])}")
    page.wait_for_function(REALMODEL_SETTLED)
    assert "rrun=" + names[0].replace("/", "%2F") in page.url
    assert check_section(page, probe(runs, names[0], PROMPTS[0]["text"], PROMPTS[0]["target"])) == []
    # hover: the largest |activation| of a state with its dimension and token
    m = probe(runs, names[0], PROMPTS[0]["text"], PROMPTS[0]["target"])["result"]["massive"]
    page.locator("#rm-massive").scroll_into_view_if_needed()
    box = page.locator("#rm-massive .u-over").bounding_box()
    page.mouse.move(box["x"] + 1, box["y"] + box["height"] / 2)  # state 0, the embedding
    tip = page.locator("#rm-massive .chart-tip")
    tip.wait_for(state="visible")
    assert tip.inner_text().startswith("state 0 (embedding): largest |activation| = ")
    assert f"dimension {m['dim'][0]}, token {m['token'][0]}" in tip.inner_text()
    # the other language: the same numbers, the questions and readings in Chinese
    page.click("#lang")
    page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
    page.wait_for_function(REALMODEL_SETTLED)
    assert check_section(page, probe(runs, names[0], PROMPTS[0]["text"], PROMPTS[0]["target"]), "zh") == []
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    page.close()


def test_typed_prompt_computing_state_cache_and_refusal(runs, live, browser):
    run = list_runs(runs)[0]["name"]
    page, watch = open_section(browser, live + f"#lang=en&rrun={run}")
    page.select_option("#rm-prompt", "")  # the shown text, now as typed text: probed as such
    page.wait_for_function(REALMODEL_SETTLED)  # (the button waits while a probe is computed)
    text = "First Citizen:\nBefore we proceed any further, hear me speak."
    page.fill("#rm-text", text)
    page.fill("#rm-target", "y")
    during = page.evaluate("""async () => {
      document.getElementById('rm-go').click();
      await new Promise((r) => setTimeout(r, 0));
      return [DL.realmodel.busy, document.getElementById('rm-status').textContent,
              document.getElementById('rm-body').getAttribute('aria-busy'), document.getElementById('rm-go').disabled];
    }""")
    assert during[0] is True and during[1].startswith("computing…") and during[2] == "true" and during[3] is True
    page.wait_for_function(REALMODEL_SETTLED, timeout=60000)
    assert page.inner_text("#rm-status").startswith("computed in")
    assert page.evaluate("() => DL.realmodel.request()") == {"run": run, "prompt": text, "target": "y"}
    body = probe(runs, run, text, "y")
    assert body["cached"] is True  # the page's request computed it and stored it
    assert check_section(page, body) == []
    assert page.evaluate("() => DL.realmodel.request()") == {"run": run, "prompt": text, "target": "y"}
    # the view is in the URL: a fresh page shows it again, from the cache
    again, _ = open_section(browser, page.url)
    assert again.input_value("#rm-text") == text and again.input_value("#rm-target") == "y"
    assert again.inner_text("#rm-status").startswith("read from the cache")
    assert check_section(again, body) == []
    again.close()
    # a prompt of one character is one token: refused, in words, and no chart left standing
    page.fill("#rm-text", "a")
    page.click("#rm-go")
    page.wait_for_function("() => document.getElementById('rm-error').textContent !== ''")
    error = page.inner_text("#rm-error")
    assert "prompt: must encode to 2..128 tokens" in error, error
    assert page.locator("#rm-body .chart").count() == 0
    assert page.evaluate("() => DL.errors") == []  # the section's own error, not a page failure
    assert [e for e in watch.errors if "400" not in e] == []
    page.close()


def test_zh_section_speaks_chinese(runs, live, browser):
    from page_harness import VISIBLE_TEXT, stray_latin

    page, _ = open_section(browser, live + "#lang=zh", 390)
    run = page.evaluate("() => DL.realmodel.request().run")
    body = probe(runs, run, PROMPTS[0]["text"], PROMPTS[0]["target"])
    assert check_section(page, body, "zh") == []
    texts = page.evaluate(VISIBLE_TEXT.replace("document.body", "document.getElementById('realmodel')"))
    assert stray_latin(texts) == []
    # the section fits the phone's width
    assert page.evaluate("() => document.getElementById('realmodel').scrollWidth <= document.documentElement.clientWidth")
    page.close()


def test_static_export_shows_the_shipped_prompts_of_one_run(runs, browser, tmp_path):
    from depthlab.web.export import export_page

    url = export_page(tmp_path, runs_dir=runs, grid="small").as_uri()
    data = json.loads(Path(tmp_path / "index.html").read_text(encoding="utf-8")
                      .split('id="depthlab-data">', 1)[1].split("</script>", 1)[0].replace("<\\/", "</"))
    rm = data["realmodel"]
    run = list_runs(runs)[0]["name"]
    assert [r["name"] for r in rm["runs"]] == [run]
    # the prompts the run can read, each with its probe
    readable = RealModelProbes(runs, threading.Lock()).readable(run)
    assert len(rm["results"]) == sum(readable.values()) >= 2
    page, watch = open_section(browser, url + "#lang=en")
    assert page.is_hidden("#rm-go") and page.inner_text("#rm-status").startswith("from this static copy")
    assert "depthlab serve" in page.inner_text("#rm-note")
    key = json.dumps([run, PROMPTS[0]["text"], PROMPTS[0]["target"]], ensure_ascii=False, separators=(",", ":"))
    assert check_section(page, rm["results"][key]) == []
    other = next(p for p in PROMPTS[1:] if readable[p["id"]])
    page.select_option("#rm-prompt", other["id"])
    page.wait_for_function(f"() => DL.realmodel.result() && DL.realmodel.result().prompt === {json.dumps(other['text'])}")
    page.wait_for_function(REALMODEL_SETTLED)  # the sections are drawn one task each
    key = json.dumps([run, other["text"], other["target"]], ensure_ascii=False, separators=(",", ":"))
    assert check_section(page, rm["results"][key]) == []
    assert watch.errors == [] and page.evaluate("() => DL.errors") == []
    # a prompt the copy does not hold: said on the page
    page.evaluate("() => DL.state.set({rp: '', rtext: 'something typed elsewhere'})")
    page.wait_for_function("() => document.getElementById('rm-error').textContent.includes('static copy')")
    page.close()


def test_static_copy_without_runs_says_so(tmp_path):
    from depthlab.web.realmodel import static_results

    out = static_results(tmp_path)
    assert out["runs"] == [] and out["results"] == {} and [p["id"] for p in out["prompts"]] == [p["id"] for p in PROMPTS]


def test_prompts_say_which_a_run_can_read(runs):
    from fastapi.testclient import TestClient

    from depthlab.web.app import create_app

    client = TestClient(create_app(runs, warm=False))
    run = list_runs(runs)[0]["name"]
    body = client.get("/api/realmodel/prompts", params={"run": run}).json()
    readable = {p["id"]: p["readable"] for p in body["prompts"]}
    assert readable["paris"] and not readable["paris-zh"]  # a character vocabulary of Shakespeare
    assert not readable["residual"]  # more than 128 characters, one token each
    assert "readable" not in client.get("/api/realmodel/prompts").json()["prompts"][0]
    r = client.get("/api/realmodel/prompts", params={"run": "nope"})
    assert r.status_code == 404 and r.json()["error"].startswith("run: unknown run 'nope'")


def test_depth_chart_draws_the_seed_band_on_whole_layers(runs, live, browser):
    export = json.loads((runs / "residual" / "export.json").read_text(encoding="utf-8"))
    depth = next(c for c in export["charts"] if c["id"] == "depth")
    page, watch = open_section(browser, live + "#lang=en")
    page.wait_for_selector("#pc-residual-depth canvas")
    c = page.evaluate("() => DL.charts.all()['pc-residual-depth']")
    depths = depth["series"][0]["x"]
    assert c["xs"] == depths
    want = [[s["lo"], s["hi"]] if "lo" in s else None for s in depth["series"]]
    assert c["bands"] == want and sum(b is not None for b in want) == 2  # residual and no residual
    labelled = [v for v, label in c["xTicks"] if label]
    assert labelled and all(float(v).is_integer() for v in labelled) and set(labelled) <= set(depths)
    # the band is inside the y range, and the hover reads the spread out
    lo = min(v for b in want if b for v in b[0])
    hi = max(v for b in want if b for v in b[1])
    assert c["yScale"][0] <= lo and hi <= c["yScale"][1]
    page.locator("#pc-residual-depth").scroll_into_view_if_needed()
    box = page.locator("#pc-residual-depth .u-over").bounding_box()
    page.mouse.move(box["x"] + 2, box["y"] + box["height"] / 2)
    tip = page.locator("#pc-residual-depth .chart-tip")
    tip.wait_for(state="visible")
    assert "(seeds: " in tip.inner_text()
    assert "(seeds: " in c["label"]  # the text alternative states the spread too
    assert watch.errors == []
    page.close()


def byte_level_runs(root: Path) -> None:
    """Two tiny runs sharing one byte-level BPE of 300 tokens trained on the shipped
    prompts (most Chinese characters split over tokens): a stand-in for SmolLM2 (imported,
    trained mostly on English) and a course-style run on 红楼梦 (trained on Chinese)."""
    import torch

    from depthlab import rundir
    from depthlab.config import apply_overrides
    from depthlab.model import Transformer
    from depthlab.presets import get_preset
    from depthlab.tokenizer import BPETokenizer

    tok = BPETokenizer.train(" ".join(p["text"] for p in PROMPTS) * 5, 300)
    for name, corpus, extra in (("english-import", "shakespeare",
                                 {"source": {"format": "gguf", "name": "SmolLM2 stand-in"}}),
                                ("hlm-course", "hongloumeng", {})):
        cfg = apply_overrides(get_preset("tiny"), [f"model.vocab_size={tok.vocab_size}",
                                                   f"data.corpus={corpus}"])
        torch.manual_seed(0)
        rundir.write_config(root / name, cfg, **extra)
        rundir.save_weights(root / name, Transformer(cfg.model))
        tok.save(root / name / rundir.TOKENIZER_FILE)


def test_byte_level_tokens_read_as_text_and_the_zh_view_offers_a_chinese_run(tmp_path, browser):
    """Every shipped prompt on both byte-level runs, in the zh view: characters merged,
    no '\ufffd' anywhere in the section; the English-trained run is said to be one, with
    the run trained on Chinese offered; a lens target typed with its space is sent so."""
    root = tmp_path / "runs"
    root.mkdir()
    byte_level_runs(root)
    url, stop = serve(root)
    try:
        page, watch = open_section(browser, url + "#lang=zh&rrun=english-import", 1400)
        note = page.locator("#rm-lang")
        assert "english-import" in note.inner_text() and note.locator("button").count() == 1
        assert "hlm-course" in note.locator("button").inner_text()
        for run in ("english-import", "hlm-course"):
            readable = RealModelProbes(root, threading.Lock()).readable(run)
            assert all(readable.values())
            for p in PROMPTS:
                page.evaluate("(s) => DL.state.set(s)", {"rrun": run, "rp": p["id"], "rtgt": ""})
                page.wait_for_function("([run, text]) => { const r = DL.realmodel.result(); return r && "
                                       "r.run === run && r.prompt === text && !DL.realmodel.busy; }",
                                       arg=[run, p["text"]], timeout=60000)
                assert check_section(page, probe(root, run, p["text"], p["target"]), "zh") == [], (run, p["id"])
        assert note.inner_text() == ""  # a run trained on Chinese needs no word
        # the offer switches to the run trained on Chinese and a Chinese prompt
        page.evaluate("() => DL.state.set({rrun: 'english-import', rp: ''})")
        note.locator("button").click()
        page.wait_for_function("() => DL.realmodel.request().run === 'hlm-course'")
        page.wait_for_function(REALMODEL_SETTLED)
        assert page.evaluate("() => DL.realmodel.request().prompt") == PROMPTS[3]["text"]
        # English view: the target keeps its leading space, and its tokens are shown
        page.evaluate("() => DL.state.set({lang: 'en', rp: 'paris', rtgt: ''})")
        page.wait_for_function("() => DL.lang() === 'en'")
        page.wait_for_function(REALMODEL_SETTLED)
        page.fill("#rm-target", " Paris")
        page.click("#rm-go")
        page.wait_for_function("() => DL.realmodel.request().target === ' Paris'")
        page.wait_for_function(REALMODEL_SETTLED, timeout=60000)
        body = probe(root, "hlm-course", PROMPTS[0]["text"], " Paris")
        assert check_section(page, body) == []
        typed = body["result"]["lens"]["typed"]
        assert typed["text"] == " Paris"
        readout = page.inner_text("#rm-sec-lens .readout")
        assert 'typed " Paris"' in readout and (f"id {typed['ids'][0]}" in readout or f"{len(typed['ids'])} tokens" in readout)
        again, _ = open_section(browser, page.url)
        assert again.input_value("#rm-target") == " Paris"
        again.close()
        assert watch.errors == [] and page.evaluate("() => DL.errors") == []
        page.close()
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)


def test_every_reading_of_every_shipped_prompt_sets_only_its_tokens_as_code(tmp_path, browser):
    """Each shipped prompt on a byte-level run (it reads them all), in both languages: every
    section's reading is the API's, and its only code spans are the tokens it quotes."""
    root = tmp_path / "runs"
    root.mkdir()
    byte_level_runs(root)
    url, stop = serve(root)
    try:
        page, watch = open_section(browser, url + "#lang=en&rrun=english-import", 1400)
        for lang in ("en", "zh"):
            for p in PROMPTS:
                page.evaluate("(s) => DL.state.set(s)", {"lang": lang, "rp": p["id"], "rtgt": ""})
                page.wait_for_function("([lang, text]) => { const r = DL.realmodel.result(); return DL.lang() === lang "
                                       "&& r && r.prompt === text && !DL.realmodel.busy; }",
                                       arg=[lang, p["text"]], timeout=60000)
                body = probe(root, "english-import", p["text"], p["target"])
                bad = [b for name in SECTIONS for b in check_reading_code(
                    page.locator(f"#rm-sec-{name}"), body["readings"][name], lang, name)]
                assert bad == [], (lang, p["id"])
                assert page.locator("#rm-sec-attention .reading code").count() == 1
        assert watch.errors == [] and page.evaluate("() => DL.errors") == []
        page.close()
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)


def test_the_stream_views_of_course_runs_with_and_without_attn_gate(tmp_path, browser):
    """Two course-style runs, one with the attention output gate and grouped K/V heads:
    the path, the writes' bars, the lens grid and every head's map draw in both languages
    and at 390 px; hovering reads out a grid cell's top-5 and a map cell's weight, and a
    small multiple picks its head."""
    import torch

    from depthlab import rundir
    from depthlab.config import apply_overrides
    from depthlab.model import Transformer
    from depthlab.presets import get_preset
    from depthlab.tokenizer import BPETokenizer

    root = tmp_path / "runs"
    root.mkdir()
    tok = BPETokenizer.train(" ".join(p["text"] for p in PROMPTS) * 5, 300)
    for name, extra in (("plain", []), ("gated", ["model.attn_gate=true", "model.n_kv_heads=1"])):
        cfg = apply_overrides(get_preset("tiny"), [f"model.vocab_size={tok.vocab_size}", *extra])
        torch.manual_seed(1)
        rundir.write_config(root / name, cfg)
        rundir.save_weights(root / name, Transformer(cfg.model))
        tok.save(root / name / rundir.TOKENIZER_FILE)
    url, stop = serve(root)
    try:
        for width in (1400, 390):
            page, watch = open_section(browser, url + "#lang=en&rrun=gated&rp=paris", width)
            body = probe(root, "gated", PROMPTS[0]["text"], PROMPTS[0]["target"])
            assert check_section(page, body) == [], width
            r = body["result"]
            assert r["attention_maps"]["kv_heads"] == 1
            assert "grouped-query" in page.inner_text("#rm-sec-maps")
            # the sum of the writes beside the model's logit, as the probe computed them
            assert f"{r['dla']['sum']:.4f}" in page.inner_text("#rm-sec-dla .reading")
            # hover: a grid cell's top-5, a map cell's weight
            cell = page.locator("#rm-sec-grid td").last
            cell.scroll_into_view_if_needed()
            cell.hover()
            g = r["lens_grid"]
            first = json.dumps(g["text"][str(g["top_id"][-1][-1][0])], ensure_ascii=False)
            tip = page.locator("#rm-sec-grid .rmv-tip")
            assert tip.inner_text().startswith(f"block {len(g['states']) - 2}, token {r['n_tokens'] - 1}: {first}")
            assert tip.inner_text().count(" · ") == 4
            big = page.locator("#rm-sec-maps .rmv-map canvas")
            big.scroll_into_view_if_needed()
            box = big.bounding_box()
            page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] - 2)  # the last query, last key
            v = page.evaluate("() => DL.realmodel.views().maps")
            weight = r["attention_maps"]["maps"][v["layer"]][v["head"]][-1][-1] / 1000
            assert page.inner_text("#rm-sec-maps .rmv-tip").endswith(
                page.evaluate("(x) => DL.fmt(x, 3)", weight))
            # a small multiple picks its head
            other = (v["head"] + 1) % r["attention_maps"]["maps"][0].__len__()
            page.locator("#rm-sec-maps .rmv-head").nth(other).click()
            assert page.evaluate("() => DL.realmodel.views().maps.head") == other
            assert page.locator("#rm-sec-maps .rmv-head").nth(other).get_attribute("aria-pressed") == "true"
            # the path's hover names a state
            path = page.locator("#rm-sec-path canvas")
            path.scroll_into_view_if_needed()
            box = path.bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            assert page.inner_text("#rm-sec-path .rmv-tip").startswith("state ")
            # the other run, then the zh view
            page.evaluate("() => DL.state.set({rrun: 'plain'})")
            page.wait_for_function("() => DL.realmodel.result() && DL.realmodel.result().run === 'plain'")
            page.wait_for_function(REALMODEL_SETTLED)
            assert check_section(page, probe(root, "plain", PROMPTS[0]["text"], PROMPTS[0]["target"])) == []
            page.click("#lang")
            page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
            page.wait_for_function(REALMODEL_SETTLED, timeout=60000)
            shown = page.evaluate("() => DL.realmodel.request()")
            assert check_section(page, probe(root, "plain", shown["prompt"], shown["target"]), "zh") == []
            assert watch.errors == [] and page.evaluate("() => DL.errors") == []
            page.close()
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)


def test_a_hybrid_run_maps_its_attention_layers_and_says_why_not_its_deltanet_layers(tmp_path, browser):
    """A qwen3_5 run (3 Gated DeltaNet layers to 1 attention layer): every chart holds the
    probe, the map's layer picker offers the attention layers by block number, and the
    DeltaNet layers are named with the reason they have no map, in both languages."""
    import torch

    from depthlab import rundir
    from depthlab.config import apply_overrides
    from depthlab.model import Transformer
    from depthlab.presets import get_preset
    from depthlab.tokenizer import BPETokenizer

    root = tmp_path / "runs"
    root.mkdir()
    tok = BPETokenizer.train(" ".join(p["text"] for p in PROMPTS) * 5, 300)
    cfg = apply_overrides(get_preset("qwen3_5"), [f"model.vocab_size={tok.vocab_size}"])
    torch.manual_seed(2)
    rundir.write_config(root / "hybrid", cfg)
    rundir.save_weights(root / "hybrid", Transformer(cfg.model))
    tok.save(root / "hybrid" / rundir.TOKENIZER_FILE)
    kinds = cfg.model.layer_kinds
    att = [str(i) for i, k in enumerate(kinds) if k == "attention"]
    delta = ", ".join(str(i) for i, k in enumerate(kinds) if k != "attention")
    url, stop = serve(root)
    try:
        page, watch = open_section(browser, url + "#lang=en&rrun=hybrid&rp=paris", 1400)
        body = probe(root, "hybrid", PROMPTS[0]["text"], PROMPTS[0]["target"])
        assert check_section(page, body) == []
        assert page.eval_on_selector_all("#rm-map-layer option", "os => os.map(o => o.textContent)") == att
        note = page.inner_text("#rm-maps-deltanet")
        assert f"Layers {delta} are Gated DeltaNet layers" in note and "no attention map" in note
        page.click("#lang")
        page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
        page.wait_for_function(REALMODEL_SETTLED, timeout=60000)
        assert "没有注意力图" in page.inner_text("#rm-maps-deltanet")
        assert watch.errors == [] and page.evaluate("() => DL.errors") == []
        page.close()
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)


def smollm2_run(root: Path) -> None:
    """runs/smollm2 when `depthlab lab` made it, else a fresh import from the installed wheel
    (as in CI, where setup.sh installs it); skipped only when the wheel is missing."""
    if (SMOLLM2 / "model.safetensors").is_file():
        (root / "smollm2").symlink_to(SMOLLM2)
        return
    from depthlab.errors import UserError
    from depthlab.hf.gguf_import import import_gguf, smollm2_path

    try:
        smollm2_path()
    except UserError as e:
        pytest.skip(str(e))
    import_gguf("smollm2", root / "smollm2")


@pytest.mark.slow
def test_smollm2_shows_its_attention_sink(tmp_path, browser):
    root = tmp_path / "runs"
    root.mkdir()
    smollm2_run(root)
    url, stop = serve(root)
    try:
        page, watch = open_section(browser, url + "#lang=en", 1400)
        body = probe(root, "smollm2", PROMPTS[0]["text"], PROMPTS[0]["target"])
        assert check_section(page, body) == []
        a = body["result"]["attention"]
        assert sum(a["layer_share"]) / len(a["layer_share"]) > a["uniform"]  # the sink
        assert "Paris" in page.inner_text("#rm-sec-lens .readout")
        # the zh view's default prompt: characters, not '\ufffd', and the note that SmolLM2
        # was trained mostly on English
        page.click("#lang")
        zh = next(p for p in PROMPTS if p["lang"] == "zh")
        page.wait_for_function("(text) => { const r = DL.realmodel.result(); return r && r.prompt === text && "
                               "!DL.realmodel.busy; }", arg=zh["text"], timeout=180000)
        assert check_section(page, probe(root, "smollm2", zh["text"], zh["target"]), "zh") == []
        assert "smollm2" in page.inner_text("#rm-lang")
        assert watch.errors == []
        page.close()
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)


def test_at_390_px_the_lens_answer_stays_in_view_and_counts_read_right(tmp_path, browser):
    """A phone-wide screen: the lens grid scrolls, and its last column (the model's answer)
    stays inside the screen, uncovered, in every row; the rank chart has no tick below
    rank 1 (its least value); the run list says "1 layer" and "2 layers" (one form in zh)."""
    import torch

    from depthlab import rundir
    from depthlab.config import apply_overrides
    from depthlab.locales import table
    from depthlab.model import Transformer

    root = tmp_path / "runs"
    root.mkdir()
    byte_level_runs(root)
    cfg = apply_overrides(rundir.read_config(root / "hlm-course")[0], ["model.n_layers=1"])
    torch.manual_seed(0)
    rundir.write_config(root / "one-layer", cfg)
    rundir.save_weights(root / "one-layer", Transformer(cfg.model))
    shutil.copy(root / "hlm-course" / rundir.TOKENIZER_FILE, root / "one-layer" / rundir.TOKENIZER_FILE)
    url, stop = serve(root)
    try:
        page, watch = open_section(browser, url + "#lang=en&rrun=english-import&rp=residual", 390)
        page.wait_for_function("() => DL.realmodel.views().grid", timeout=60000)
        # each row brought into view vertically; the grid's own scroll stays where it starts
        cells = page.evaluate("""() => {
          const t = DL.realmodel.views().grid.table;
          return [...t.querySelectorAll('tr')].map((tr) => {
            window.scrollTo(0, window.scrollY + tr.getBoundingClientRect().top - 300);
            const c = tr.lastElementChild;
            const b = c.getBoundingClientRect();
            const hit = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
            return {left: b.left, right: b.right, mine: !!hit && c.contains(hit), at: t.parentElement.scrollLeft,
                    scrolls: t.parentElement.scrollWidth > t.parentElement.clientWidth};
          });
        }""")
        bad = []
        assert cells and all(c["scrolls"] and c["at"] == 0 for c in cells)  # the prompt is wider than the screen
        if not all(0 <= c["left"] and c["right"] <= 390 and c["mine"] for c in cells):
            bad.append(f"the answer column is out of view: {cells[:2]}")
        rank = page.evaluate("() => DL.charts.all()['rm-rank']")
        if rank["yScale"][0] < 0 or min(v for v, label in rank["yTicks"] if label) < 0:
            bad.append(f"rank ticks below 1: {rank['yTicks']}")
        for lang in ("en", "zh"):
            page.evaluate("(l) => DL.state.set({lang: l})", lang)
            page.wait_for_function("(l) => DL.lang() === l", arg=lang)
            shown = {o["value"]: o["text"] for o in page.eval_on_selector_all(
                "#rm-run option", "os => os.map((o) => ({value: o.value, text: o.textContent}))")}
            for r in list_runs(root):
                n = r["n_layers"]
                word = table(lang)["rm.layers.one" if lang == "en" and n == 1 else "rm.layers"].format(n=n)
                if not shown[r["name"]].endswith(word):
                    bad.append(f"{lang}: {shown[r['name']]!r} does not end with {word!r}")
        assert bad == []
        assert shown["one-layer"].endswith("1 层") and "1 layers" not in " ".join(shown.values())
        assert watch.errors == [] and page.evaluate("() => DL.errors") == []
        page.close()
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)
