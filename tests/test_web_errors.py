"""The server's refusals come back in the language the page asks for (Accept-Language),
each with its locale key and parameters, from the same tables as the page's sentences."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from depthlab.locales import table
from depthlab.web.app import create_app
from depthlab.web.guard import TOKEN_HEADER
from depthlab.web.messages import field_error, request_lang, say
from tests.test_locales_zh import ascii_punctuation

WEB = Path(__file__).resolve().parent.parent / "depthlab" / "web"
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture()
def client(tmp_path):
    return TestClient(create_app(tmp_path / "runs", warm=False))


@pytest.fixture()
def headers(client):
    token = client.get("/api/meta").json()["write_token"]
    return lambda lang=None: {TOKEN_HEADER: token, **({"accept-language": lang} if lang else {})}


def rendered(body: dict, lang: str) -> None:
    """The body's sentence is its key rendered with its params in `lang`."""
    assert body["error"] == table(lang)[body["code"]].format(**body["params"])


def test_an_unknown_experiment_is_refused_in_chinese(client, headers):
    en = client.get("/api/experiments/nope", headers=headers()).json()
    zh = client.get("/api/experiments/nope", headers=headers("zh-CN,zh;q=0.9,en;q=0.8")).json()
    assert en["code"] == zh["code"] == "err.unknown_experiment" and en["params"] == zh["params"]
    assert en["error"].startswith("name: unknown experiment 'nope'; choose one of: residual")
    assert zh["error"].startswith("name：没有实验 'nope'；可选：residual")
    rendered(en, "en")
    rendered(zh, "zh")


def test_a_refused_write_and_a_bad_field_are_said_in_chinese(client, headers):
    token = headers()[TOKEN_HEADER]
    r = client.post("/api/paths", json={"n": 2}, headers={"accept-language": "zh"})
    assert r.status_code == 403 and r.json()["code"] == "err.token_missing"
    assert "缺少凭据" in r.json()["error"]
    r = client.post("/api/paths", json={"n": 2}, headers={"accept-language": "zh", TOKEN_HEADER: token[::-1]})
    assert r.status_code == 403 and "凭据不对" in r.json()["error"]
    r = client.post("/api/simulate", json={"n": 999, "mode": "sideways", "zz": 1}, headers=headers("zh"))
    body = r.json()
    assert r.status_code == 422
    assert body["error"] == "mode：应为 'gradient'、'collapse' 之一；n：应小于或等于 64；zz：不接受这一项（多出的字段）"
    assert [d["code"] for d in body["detail"]] == ["err.v.literal_error", "err.v.less_than_equal",
                                                   "err.v.extra_forbidden"]
    english = client.post("/api/simulate", json={"n": 999}, headers=headers("en-GB")).json()
    assert english["error"] == "n: Input should be less than or equal to 64"  # pydantic's own words


@pytest.mark.parametrize("call", [
    lambda c, h: c.get("/api/nothing", headers=h),
    lambda c, h: c.delete("/api/simulate", headers=h),
    lambda c, h: c.post("/api/norms", json={"x": "3 4x"}, headers=h),
    lambda c, h: c.post("/api/norms", content=b"\xff\xfe", headers={**h, "content-type": "application/json"}),
    lambda c, h: c.post("/api/experiments/residual/run", content=b"{}", headers={**h, "content-type": "text/plain"}),
    lambda c, h: c.post("/api/realmodel/probe", json={"run": "none", "prompt": "hello"}, headers=h),
    lambda c, h: c.get("/api/locale/fr", headers=h),
])
def test_every_kind_of_refusal_has_a_key_and_reads_as_chinese(client, headers, call):
    body = call(client, headers("zh")).json()
    assert body["code"].startswith("err.") and CJK.search(body["error"]), body
    assert not ascii_punctuation(body["error"], body["code"]) or body["code"] in (
        "err.unknown_run_none", "err.not_found", "err.method_not_allowed"), body  # with a path in it
    if "detail" not in body or len(body["detail"]) == 1:
        assert body["error"].startswith(body.get("detail", [{"field": ""}])[0]["field"])
    english = call(client, headers()).json()
    assert english["code"] == body["code"] and not CJK.search(english["error"])


def test_accept_language_picks_the_weightiest_language_we_have():
    assert request_lang({"accept-language": "zh-CN,zh;q=0.9"}) == "zh"
    assert request_lang({"accept-language": "fr-FR, zh;q=0.5"}) == "zh"
    assert request_lang({"accept-language": "en-US,zh;q=0.5"}) == "en"
    assert request_lang({"accept-language": "fr"}) == request_lang({}) == "en"
    # weights, not order; q=0 is "not this one" (RFC 9110); a bad weight counts as 0
    assert request_lang({"accept-language": "en;q=0.5, zh;q=0.9"}) == "zh"
    assert request_lang({"accept-language": "zh;q=0, en;q=1"}) == "en"
    assert request_lang({"accept-language": "zh;q=0"}) == "en"
    assert request_lang({"accept-language": "zh;q=abc"}) == request_lang({"accept-language": "zh;q=nan"}) == "en"
    assert request_lang({"accept-language": "zh;q=0.8, en;q=0.8"}) == "zh"  # first among equals


def test_every_key_the_server_raises_is_in_both_tables_with_its_fields():
    """Each `refusal("err.…", ...)` and `error_body("err.…", ...)` in depthlab/web names a key
    of both tables, and passes exactly the template's fields."""
    used = {}
    for path in WEB.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("refusal", "_error")
                    and node.args):
                key = next(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
                used[key] = {k.arg for k in node.keywords if k.arg}
    assert len(used) >= 15, used
    field = re.compile(r"\{(\w+)\}")
    for key, names in used.items():
        for lang in ("en", "zh"):
            assert set(field.findall(table(lang)[key])) == names, (key, lang)


def test_each_pydantic_message_template_has_the_fields_its_context_gives():
    errors = [{"type": "less_than_equal", "loc": ("body", "n"), "msg": "m", "ctx": {"le": 64}},
              {"type": "too_short", "loc": ("body", "x"), "msg": "m",
               "ctx": {"field_type": "Tuple", "min_length": 1, "actual_length": 0}},
              {"type": "string_pattern_mismatch", "loc": ("body", "config"), "msg": "m", "ctx": {"pattern": "^a$"}},
              {"type": "number_text", "loc": ("body", "x"), "msg": "m", "ctx": {"piece": "'4x'"}},
              {"type": "something_new", "loc": ("query", "q"), "msg": "Something new"}]
    out = [field_error(e, "zh") for e in errors]
    assert [o["message"] for o in out] == ["应小于或等于 64", "至少应有 1 项", "应符合模式 `^a$`",
                                           "应为用逗号或空格分隔的数字；'4x' 不是数字", "不合要求（Something new）"]
    assert [o["field"] for o in out] == ["n", "x", "config", "x", "q"]
    for key in (k for k in table("en") if k.startswith("err.v.")):
        assert say(key, "zh", dict.fromkeys(re.findall(r"\{(\w+)\}", table("en")[key]), "1"))


@pytest.mark.parametrize("url, field, kind", [
    ("/api/block?presett=llama", "presett", "extra_forbidden"),  # a typo: not the default
    ("/api/block?preset=llama&preset=gpt2", "preset", "query_repeated"),  # not the last
    ("/api/meta?x=1", "x", "extra_forbidden"),
    ("/api/frontier?preset=course", "preset", "extra_forbidden"),
    ("/api/anatomy?tokens=5&tokens=6", "tokens", "extra_forbidden")])
def test_an_api_get_refuses_a_query_it_does_not_read(client, url, field, kind):
    """A GET reads its query as a POST reads its body: what it does not take, or takes
    twice, is a 422 naming the parameter, in the page's language."""
    for lang in ("en", "zh"):
        r = client.get(url, headers={"accept-language": lang})
        assert r.status_code == 422, url
        body = r.json()
        assert [(d["field"], d["type"]) for d in body["detail"]] == [(field, kind)]
        rendered(body, lang)
        assert CJK.search(body["error"]) if lang == "zh" else not CJK.search(body["error"])
    assert client.get("/api/block?preset=llama").status_code == 200
    assert client.get("/?lang=zh").status_code == 200  # the page's own address is not an API
