"""The probe and anatomy commands: exit codes, JSON keys, one-line errors, plots."""

import json

import pytest

from depthlab.cli import main


def run_json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_gradflow_json(capsys):
    out = run_json(capsys, ["probe", "gradflow", "--depth", "32", "--gain", "0.5"])
    assert out["kind"] == "gradient" and out["request"]["residual"] == "none"
    naive = out["naive"]
    assert naive["ratio"] <= 1e-15 and out["improved"] == naive  # no switch: the same stack
    assert len(naive["per_layer"]) == 32 and naive["per_layer"][-1] == 1.0
    assert len(naive["stream_rms"]) == 33
    improved = run_json(capsys, ["probe", "gradflow", "--depth", "32", "--gain", "0.5",
                                 "--residual", "scaled", "--norm", "rmsnorm", "--seed", "3"])
    assert 0.5 <= improved["improved"]["ratio"] <= 5
    assert improved["naive"]["ratio"] <= 1e-15
    assert improved["request"]["write_scale"] == pytest.approx(32 ** -0.5)


def test_old_flags_read_as_the_models_switches(capsys):
    new = run_json(capsys, ["probe", "collapse", "--depth", "6", "--residual", "scaled",
                            "--norm", "rmsnorm"])
    old = run_json(capsys, ["probe", "collapse", "--depth", "6", "--residual", "--prenorm",
                            "--scale-writes"])
    assert old == new
    plain = run_json(capsys, ["probe", "collapse", "--depth", "6", "--residual"])
    assert plain["request"]["residual"] == "plain" and plain["request"]["norm"] == "none"


def test_gradflow_sweep_json(capsys):
    out = run_json(capsys, ["probe", "gradflow", "--sweep", "--residual", "plain"])
    assert out["kind"] == "sweep"
    assert len(out["gains"]) == len(out["improved"]) == len(out["naive"]) == 31
    assert out["gains"][0] == 0.5 and out["gains"][-1] == 2.0
    assert min(out["improved"]) >= 1


def test_collapse_json(capsys):
    out = run_json(capsys, ["probe", "collapse", "--depth", "32", "--gain", "1.0"])
    naive = out["naive"]
    assert len(naive["rel_distance"]) == 33 and naive["rel_distance"][-1] <= 1e-8
    assert len(naive["mean_cosine"]) == 33
    ffn = run_json(capsys, ["probe", "collapse", "--depth", "8", "--ffn", "--residual", "rezero"])
    assert ffn["request"]["ffn"] is True
    assert len(set(ffn["improved"]["rel_distance"])) == 1  # rezero: the identity at init


def test_growth_paths_norms_json(capsys):
    g = run_json(capsys, ["probe", "growth", "--writes", "128"])
    assert g["expected"][-1] == pytest.approx(11.3578, abs=1e-3)
    assert len(g["measured_rms"]) == 129
    real = run_json(capsys, ["probe", "growth", "--writes", "8", "--real", "--preset", "tiny",
                             "--tokens", "8"])
    assert len(real["real"]["rows"]) == 4
    p = run_json(capsys, ["probe", "paths", "--depth", "2", "--scale", "0.5"])
    assert p["residual_output"] == 2.25 and p["plain_output"] == 0.25
    n = run_json(capsys, ["probe", "norms", "3", "4"])
    assert n["rmsnorm"] == pytest.approx([0.8485, 1.1314], abs=1e-4)


def test_anatomy_cli(capsys):
    a = run_json(capsys, ["anatomy", "gpt2", "--tokens", "5"])
    assert a["total_params"] == 124_439_808
    b = run_json(capsys, ["anatomy", "--preset", "course"])
    assert b["n_writes"] == 8
    rows = run_json(capsys, ["anatomy", "--evolution"])
    assert any(r["name"] == "lesson-anchor" for r in rows)
    assert main(["anatomy", "qwen3-14b"]) == 0
    assert "5120 -> 17408" in capsys.readouterr().out


def test_tables_print(capsys):
    for argv in (["probe", "gradflow", "--depth", "4"], ["probe", "gradflow", "--sweep"],
                 ["probe", "collapse", "--depth", "4"], ["probe", "paths", "--depth", "3"],
                 ["probe", "norms", "3", "4"], ["probe", "growth", "--writes", "16"]):
        assert main(argv) == 0
    assert "bottom/top" in capsys.readouterr().out


def test_plot_files(tmp_path):
    png, svg = tmp_path / "sweep.png", tmp_path / "collapse.svg"
    assert main(["probe", "gradflow", "--sweep", "--plot", str(png)]) == 0
    assert main(["probe", "collapse", "--depth", "8", "--plot", str(svg)]) == 0
    assert png.stat().st_size > 1000 and svg.read_text().startswith("<?xml")


@pytest.mark.parametrize("argv", [
    ["probe", "gradflow", "--depth", "0"],
    ["probe", "gradflow", "--depth", "257"],
    ["probe", "gradflow", "--gain", "0"],
    ["probe", "collapse", "--gain", "-1"],
    ["probe", "gradflow", "--gain", "abc"],
    ["probe", "norms", "3", "x"],
    ["probe", "paths", "--depth", "0"],
    ["probe", "gradflow", "--plot", "out.pdf"],
    ["anatomy", "/nonexistent/config.json"],
    ["anatomy"],
])
def test_bad_flags_exit_2_with_one_line(capsys, argv):
    with_exit = None
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors (a non-numeric --gain)
        with_exit = e.code
        code = e.code
    assert code == 2, with_exit
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1 and "error" in err


def test_unreadable_config_file(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text("{")
    assert main(["anatomy", str(bad)]) == 2
    assert "config.json: not valid JSON" in capsys.readouterr().err


def test_probe_run_measures_a_run_directory(tmp_path, capsys):
    import json

    import torch

    from depthlab.model import Transformer
    from depthlab.presets import tiny
    from depthlab.rundir import save_weights, write_config

    torch.manual_seed(0)
    cfg = tiny()
    write_config(tmp_path, cfg)
    save_weights(tmp_path, Transformer(cfg.model))
    assert main(["probe", "run", str(tmp_path), "--ids", "1,2,3,4,5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    L = cfg.model.n_layers
    assert len(out["grad_norm"]) == 2 * L and len(out["stream_rms"]) == 2 * L + 1
    assert out["per_layer"][-1] == 1.0 and out["prompt_ids"] == [1, 2, 3, 4, 5]
    assert main(["probe", "run", str(tmp_path / "missing"), "--ids", "1,2"]) == 2
    assert "no such run directory" in capsys.readouterr().err
