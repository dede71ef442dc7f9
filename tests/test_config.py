"""Config validation, overrides, JSON round trip, presets."""

import json

import pytest

from depthlab.config import Config, ModelConfig, apply_overrides, diff, validate, validate_model
from depthlab.errors import ConfigError
from depthlab.presets import PRESETS, course, get_preset


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_validate_and_round_trip_json(name, tmp_path):
    cfg = get_preset(name)
    path = tmp_path / "c.json"
    path.write_text(cfg.to_json())
    assert Config.load(path) == cfg
    assert hash(cfg) == hash(Config.load(path))  # frozen: usable as a cache key


def test_presets_derive_from_one_another():
    d = diff(get_preset("qwen3"), get_preset("qwen_next"))
    assert set(d) == {"model.norm", "model.norm_eps", "model.attn_gate"}
    d = diff(get_preset("gpt2"), get_preset("vaswani2017"))
    assert set(d) == {"model.placement", "model.ffn", "model.final_norm", "model.scaled_init"}


def test_course_is_the_lesson_model():
    m = course().model
    assert (m.n_layers, m.norm, m.placement, m.ffn, m.position, m.final_norm) == (
        4, "rmsnorm", "pre", "swiglu", "rope", True)


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["model.n_heads=3"], "model.d_model=128 is not divisible by model.n_heads=3"),
        (["model.norm=none", "model.placement=post", "model.final_norm=false"],
         "model.placement='post' needs a norm"),
        (["model.ffn=mish"], "model.ffn='mish' is not allowed; choose one of: relu, gelu, swiglu"),
        (["model.norm=batchnorm"], "choose one of: none, layernorm, rmsnorm, rmsnorm_zero_centered"),
        (["model.residual=half"], "choose one of: none, plain, scaled"),
        (["model.placement=middle"], "choose one of: pre, post, sandwich, output"),
        (["model.n_layers=0"], "model.n_layers must be between 1 and"),
        (["model.n_kv_heads=3"], "model.n_heads=4 is not a multiple of model.n_kv_heads=3"),
        (["model.ffn_clamp=7", "model.ffn=gelu"], "model.ffn_clamp applies to ffn=swiglu only"),
        (["model.norm=none"], "model.final_norm=true needs a norm"),
        (["model.n_layers=four"], "model.n_layers must be an integer, got 'four'"),
        (["model.qk_norm=maybe"], "model.qk_norm must be true or false"),
        (["model.init_gain=-1"], "model.init_gain must be > 0"),
        (["model.n_layer=12"], "unknown config key 'model.n_layer'; did you mean model.n_layers"),
        (["n_layers"], "expected KEY=VALUE"),
        (["train.seq_len=1024"], "train.seq_len=1024 exceeds model.context_len=256"),
        (["train.optimizer=sgd"], "train.optimizer='sgd' is not allowed; choose one of: adamw, muon"),
        (["train.muon_lr=0"], "train.muon_lr must be in (0, 10]"),
        (["train.muon_momentum=1"], "train.muon_momentum must be in [0, 1)"),
    ],
)
def test_bad_overrides_name_the_field(overrides, fragment):
    with pytest.raises(ConfigError) as e:
        apply_overrides(course(), overrides)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def test_overrides_parse_types():
    cfg = apply_overrides(course(), ["model.n_layers=12", "model.residual=none",
                                     "model.n_kv_heads=2", "model.qk_norm=true",
                                     "model.ffn_clamp=7", "train.lr=1e-3"])
    assert cfg.model.n_layers == 12 and cfg.model.residual == "none"
    assert cfg.model.n_kv_heads == 2 and cfg.model.qk_norm is True
    assert cfg.model.ffn_clamp == 7.0 and cfg.train.lr == 1e-3
    assert apply_overrides(cfg, ["model.n_kv_heads=none"]).model.n_kv_heads is None


def test_unknown_section_and_bad_json(tmp_path):
    with pytest.raises(ConfigError, match="unknown config section 'optim'"):
        Config.from_dict({"optim": {}})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        Config.load(bad)
    with pytest.raises(ConfigError, match="no such config file"):
        Config.load(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="model.d_model must be an integer"):
        Config.from_dict({"model": {"d_model": 1.5}})


def test_run_config_record_loads(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"config": course().to_dict(), "seed": 1}))
    assert Config.load(path) == course()


def test_derived_sizes():
    m = ModelConfig(d_model=128, ffn="swiglu")
    assert m.ffn_hidden == 352  # 8 * 128 / 3 = 341.3, rounded up to a multiple of 16
    assert ModelConfig(ffn="gelu").ffn_hidden == 512
    assert ModelConfig(n_layers=4).n_writes == 8
    assert validate_model(ModelConfig(head_dim=48, d_model=128, n_heads=4)).head_size == 48
    assert validate(course()) == course()


def test_every_norm_has_its_diagram_label():
    from depthlab.config import NORM_LABELS, NORMS

    assert tuple(NORM_LABELS) == NORMS
    assert all(NORM_LABELS[k] for k in NORMS if k != "none")


@pytest.mark.parametrize(("value", "got"), [("null", "got null"), ("5", "got 5"), ('"xyz"', "got a string"),
                                            ("[]", "got an array"), ("true", "got true")])
def test_a_run_config_whose_config_field_is_no_object_is_refused_by_name(tmp_path, value, got):
    # a run's config.json is {"config": {...}, provenance}; anything else there was a TypeError
    path = tmp_path / "config.json"
    path.write_text('{"config": ' + value + "}", encoding="utf-8")
    with pytest.raises(ConfigError, match="field config must be an object with sections model, "
                                          "data, train, " + got):
        Config.load(path)
