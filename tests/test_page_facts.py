"""The page reads facts, it does not derive them: its text tables, the data-flow stages,
the placements and the bounds all come from the server (or a static copy's data), and
every text key the page's scripts and HTML name exists in the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from depthlab.config import PLACEMENTS
from depthlab.locales import LANGS, table
from depthlab.presets import PRESETS
from depthlab.probes.anatomy import anatomy_of, anatomy_of_preset
from depthlab.web.app import create_app
from depthlab.web.schemas import PathsRequest

STATIC = Path(__file__).resolve().parent.parent / "depthlab" / "web" / "static"
KEY = re.compile(r'"([a-z_]+(?:\.[a-z0-9_]+)+)"')  # a dotted string literal: a text key


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    return TestClient(create_app(tmp_path_factory.mktemp("runs"), warm=False))


@pytest.mark.parametrize("lang", LANGS)
def test_locale_route_serves_the_merged_table(client, lang):
    r = client.get(f"/api/locale/{lang}")
    assert r.status_code == 200 and r.json() == table(lang)
    assert r.json()["title"] != table("en" if lang == "zh" else "zh")["title"]


def test_locale_route_names_the_field_and_the_choices(client):
    r = client.get("/api/locale/fr")
    assert r.status_code == 422
    assert r.json()["error"] == "lang: Input should be 'en' or 'zh'"


def test_every_key_the_page_names_is_in_the_table():
    keys = set(table("en"))
    named = {(f.name, k) for f in STATIC.glob("js/*.js") for k in KEY.findall(f.read_text())}
    html = (STATIC / "index.html").read_text()
    named |= {("index.html", k) for k in re.findall(r'data-i18n="([^"]+)"', html)}
    assert len(named) > 150  # the scan finds the keys at all
    assert sorted(n for n in named if n[1] not in keys) == []


def test_the_page_holds_no_text_of_its_own():
    """No Chinese in the page's scripts or HTML outside comments: every sentence is in the table."""
    cjk = re.compile(r"[\u4e00-\u9fff]")
    for f in [*STATIC.glob("js/*.js"), STATIC / "index.html"]:
        code = [line for line in f.read_text().splitlines() if not line.lstrip().startswith("//")]
        assert [line for line in code if cjk.search(line)] == [], f.name


def test_meta_publishes_placements_and_bounds(client):
    m = client.get("/api/meta").json()
    assert m["placements"] == list(PLACEMENTS)
    a = PathsRequest.model_fields["a"].metadata
    assert m["limits"]["paths_a"] == [a[0].ge, a[1].le] and m["limits"]["paths_n"] == [1, 64]
    html = (STATIC / "index.html").read_text()
    assert not any(f"<option>{p}</option>" in html for p in PLACEMENTS)  # listed from meta only


def _stage(a, key):
    return next(s for s in a.to_json()["stages"] if s["key"] == key)


def test_final_norm_counts_all_its_weights():
    # GPT-2: LayerNorm with weight and bias over d = 768; the course model: RMSNorm, weight only
    assert _stage(anatomy_of("gpt2"), "final_norm")["params"] == 1536
    assert _stage(anatomy_of_preset("course"), "final_norm")["params"] == 128
    assert _stage(anatomy_of("gpt2"), "lm_head")["tied"] is True
    assert _stage(anatomy_of("gpt2"), "lm_head")["params"] == 0


@pytest.mark.parametrize("name", ["gpt2", "llama-2-7b", "deepseek-llm-67b", "qwen3-14b"])
def test_stages_add_up_to_the_model(name):
    """Every parameter is in exactly one stage: the stages' counts add up to the total,
    each block stage is its layers' copies of one, and the order is the forward pass."""
    j = anatomy_of(name).to_json()
    stages = j["stages"]
    assert sum(s["params"] for s in stages) == j["total_params"]
    keys = [s["key"] for s in stages]
    assert keys[:2] == ["embedding", "positions"] and keys[-2:] == ["final_norm", "lm_head"]
    assert keys.index("attn_norm") < keys.index("attention") < keys.index("ffn")  # pre-norm
    for s in stages:
        if s["layers"] is not None:
            assert s["params"] == s["layers"] * s["params_per_layer"]
    assert _stage(anatomy_of(name), "attn_residual")["params"] == 0  # the add holds no weights


@pytest.mark.parametrize("preset", PRESETS)
def test_stages_follow_the_placement(preset):
    """Post-Norm puts the norm after the add; every preset's stages add up too."""
    a = anatomy_of_preset(preset)
    keys = [s["key"] for s in a.to_json()["stages"]]
    assert sum(s["params"] for s in a.to_json()["stages"]) == a.total_params
    if a.model.placement == "post":
        assert keys.index("attn_residual") < keys.index("attn_norm")


@pytest.fixture(scope="module")
def empty_page(tmp_path_factory):
    """The live page on a runs folder with nothing in it (the facts need no experiment)."""
    pytest.importorskip("playwright.sync_api")
    from page_harness import serve

    url, stop = serve(tmp_path_factory.mktemp("empty-runs"))
    yield url
    stop()


def _open(browser, url):
    page = browser.new_page(viewport={"width": 1400, "height": 900}, locale="en-US")
    page.goto(url)
    page.wait_for_function("() => window.DL && DL.ready", timeout=20000)
    return page


@pytest.mark.browser
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="/usr/bin/chromium is not installed")
def test_page_shows_the_anatomy_stages_and_meta_lists(empty_page, browser, client):
    page = _open(browser, empty_page + "#lang=zh&flow=gpt2&pn=999&pa=-50")
    stages = client.get("/api/anatomy/gpt2").json()["stages"]
    i = next(i for i, s in enumerate(stages) if s["key"] == "final_norm")
    page.click(f'#flow-stages .stage[data-stage="final_norm:{i + 1}"]')
    page.wait_for_function("() => document.querySelector('#flow-stages .stage.on .stage-name')"
                           f".textContent === {table('zh')['flow.stage.final_norm']!r}")
    assert page.inner_text("#flow-params") == f"{stages[i]['params']:,}" == "1,536"  # GPT-2 itself
    # the placements are /api/meta's; the formula's inputs are clamped to its bounds
    assert page.eval_on_selector_all("#b-placement option", "os => os.map(o => o.value)") == ["", *PLACEMENTS]
    page.wait_for_function("() => location.hash.includes('pn=64') && location.hash.includes('pa=-10')")
    assert page.get_attribute("#pn", "max") == "64" and page.get_attribute("#pa", "min") == "-10"
    assert page.evaluate("() => DL.errors") == []
    page.close()
