"""Numbers typed on a Chinese keyboard: full-width digits, commas, minus and period read
as their ASCII forms, by the server (depthlab.numtext), the CLI, and the page's copy of
the rules (DL.parseNumbers in web/static/js/api.js, run here in Node when it is there)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from depthlab.cli import main
from depthlab.numtext import NumberTextError, normalize, parse_number, parse_numbers
from depthlab.web.app import create_app
from depthlab.web.guard import TOKEN_HEADER

API_JS = Path(__file__).resolve().parent.parent / "depthlab" / "web" / "static" / "js" / "api.js"

TYPED = {
    "3,4": [3.0, 4.0], "3，4": [3.0, 4.0], "３，４": [3.0, 4.0], "3、4": [3.0, 4.0],
    "3 4": [3.0, 4.0], "3\u30004": [3.0, 4.0], "3；4;5": [3.0, 4.0, 5.0], " 3 ,, 4 ": [3.0, 4.0],
    "－０．５，２": [-0.5, 2.0], "\u22122.5": [-2.5], "\u20131": [-1.0], "﹣1": [-1.0],
    "1e-3, ＋２": [0.001, 2.0], "１ｅ３": [1000.0], ".5 3.": [0.5, 3.0], "": [],
}
REFUSED = ["3 4x", "３,４;a", "1..2", "--1", "inf", "nan", "0x10", "٣", "1_000", "1e", "e3", "½",
           "3², 4", "①", "2⁻³"]  # compatibility digits are not width forms: never 32, 1 or 2-3


@pytest.mark.parametrize("text, numbers", TYPED.items())
def test_typed_numbers_read_as_their_ascii_forms(text, numbers):
    assert parse_numbers(text) == numbers


@pytest.mark.parametrize("text", REFUSED)
def test_what_is_not_a_number_is_named(text):
    with pytest.raises(NumberTextError) as e:
        parse_numbers(text)
    assert e.value.piece in normalize(text)


def test_one_number():
    assert parse_number("－３．２５") == -3.25
    with pytest.raises(NumberTextError):
        parse_number("3，4")


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_page_reads_typed_numbers_as_the_server_does():
    cases = list(TYPED) + REFUSED
    script = ("globalThis.window = {}; require(process.argv[1]);"
              "const cases = JSON.parse(process.argv[2]);"
              "console.log(JSON.stringify(cases.map((c) => window.DL.parseNumbers(c))));")
    out = subprocess.run(["node", "-e", script, str(API_JS), json.dumps(cases)], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    page = dict(zip(cases, json.loads(out), strict=True))
    for text, numbers in TYPED.items():
        assert page[text] == {"x": numbers, "bad": None}, text
    for text in REFUSED:
        with pytest.raises(NumberTextError) as e:
            parse_numbers(text)
        assert page[text] == {"x": None, "bad": e.value.piece}, text


def test_the_norm_calculator_takes_full_width_text_with_the_same_result(tmp_path):
    client = TestClient(create_app(tmp_path / "runs", warm=False))
    headers = {TOKEN_HEADER: client.get("/api/meta").json()["write_token"]}
    plain = client.post("/api/norms", json={"x": [3, 4]}, headers=headers).json()
    for typed in ("3,4", "3，4", "３，４", "3、 4"):
        r = client.post("/api/norms", json={"x": typed}, headers=headers)
        assert r.status_code == 200 and r.json() == plain, typed
    assert plain["rmsnorm"] == pytest.approx([3 / 12.5 ** 0.5, 4 / 12.5 ** 0.5], rel=1e-6)
    bad = client.post("/api/norms", json={"x": "3，4x"}, headers={**headers, "accept-language": "zh"})
    assert bad.status_code == 422 and bad.json()["error"] == "x：应为用逗号或空格分隔的数字；'4x' 不是数字"


def test_the_cli_reads_the_same_text(capsys):
    assert main(["probe", "norms", "３，４", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert main(["probe", "norms", "3", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == full
    assert main(["probe", "norms", "3", "x"]) == 2
    assert "norms needs numbers, got '3 x'" in capsys.readouterr().err


def test_negative_entries_in_every_float_form_are_numbers_not_flags(capsys):
    """argparse takes -2 and -.5 for numbers but -1e3 for an unknown flag; probe norms
    reads every form as an entry of the vector, and a real flag stays a flag."""
    assert main(["probe", "norms", "-1000", "2", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    for form in ("-1e3", "-1E+3", "-1000.", "-1.0e3"):
        assert main(["probe", "norms", form, "2", "--json"]) == 0, form
        assert json.loads(capsys.readouterr().out) == plain, form
    assert main(["probe", "norms", "-1e3", "-2.5e-1", "--eps", "1e-6", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["x"] == [-1000.0, -0.25]
    for flag, form in (("--scale", "-1e-3"), ("--x0", "-2E1")):  # a flag's value too
        assert main(["probe", "paths", flag, form, "--json"]) == 0, flag
        assert json.loads(capsys.readouterr().out)["scale" if flag == "--scale" else "x0"] == float(form)
    with pytest.raises(SystemExit) as stop:
        main(["probe", "norms", "-e3", "2"])
    assert stop.value.code == 2 and "unrecognized arguments: -e3" in capsys.readouterr().err
