"""The variant spec table (depthlab.variants) is the one list of residuals and norms: the
model's registries hold the same keys, every reader lists what it lists, each spec's
counts are the built model's, and a new residual added to the spec and the registry
alone reaches the config, simulator, page, schemas, memory and HF export."""

import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from depthlab import config, memory
from depthlab.config import ModelConfig, validate_model
from depthlab.errors import ConfigError
from depthlab.locales import LANGS, table
from depthlab.model.norms import NORM_CLASSES
from depthlab.model.residual import RESIDUAL_BUILDERS
from depthlab.probes import simulator_bounds
from depthlab.variants import NORM_SPECS, RESIDUAL_SPECS, WIDENS, public_specs

ROOT = Path(__file__).parent.parent


def test_registry_keys_are_the_spec_keys():
    assert list(RESIDUAL_BUILDERS) == list(RESIDUAL_SPECS)
    assert list(NORM_CLASSES) == [k for k in NORM_SPECS if k != "none"]
    assert all(key == spec.key for key, spec in (*RESIDUAL_SPECS.items(), *NORM_SPECS.items()))


def test_every_reader_lists_the_spec_keys():
    from depthlab.web.lesson import page_facts
    from depthlab.web.schemas import SimulateRequest
    from depthlab.web.sections import switches  # the static copy's simulator settings

    residuals = list(RESIDUAL_SPECS)
    assert list(config.RESIDUALS) == residuals and list(config.NORMS) == list(NORM_SPECS)
    assert list(config.NORM_LABELS) == list(NORM_SPECS)
    facts = page_facts()
    bounds = facts["simulator"]
    assert bounds["residuals"] == residuals
    assert list(bounds["formulas"]) == residuals and list(bounds["labels"]) == residuals
    assert [s["key"] for s in facts["variants"]["residuals"]] == residuals
    assert [s["key"] for s in facts["variants"]["norms"]] == list(NORM_SPECS)
    schema = SimulateRequest.model_json_schema()["properties"]["residual"]
    assert schema["enum"] == residuals
    assert all(RESIDUAL_SPECS[r].formula in schema["description"] for r in residuals)
    assert sorted({v["residual"] for v in switches()}) == sorted(residuals)


def test_derived_groups_are_properties_of_the_specs():
    """Each group a reader asks about is a property of one spec entry, read from its fields."""
    for s in RESIDUAL_SPECS.values():
        assert s.widens in WIDENS
        assert s.widens_copies == (s.widens == "copies") and s.keeps_history == (s.widens == "history")
        assert s.is_post == (s.placements == ("post",)) and s.norm_slot == ("post" if s.is_post else "pre")
        assert s.needs_no_norm == (s.norms == ("none",))
        assert s.takes_x0_mix == (not s.widens and not s.sphere and not s.needs_no_norm)
        assert s.write_rule in ("add", "replace", "other")
    bounds = simulator_bounds.page_bounds()
    assert bounds["post_norm"] == [k for k, s in RESIDUAL_SPECS.items() if s.is_post]
    assert bounds["x0_mix"] == [k for k, s in RESIDUAL_SPECS.items() if s.takes_x0_mix]
    assert list(bounds["streams"]) == [k for k, s in RESIDUAL_SPECS.items() if s.widens_copies]
    assert config.NORM_LABELS["none"] == "" and all(s.label for k, s in NORM_SPECS.items() if k != "none")


@pytest.mark.parametrize("lang", LANGS)
def test_every_residual_has_its_page_label(lang):
    missing = [s.label_key for s in RESIDUAL_SPECS.values() if s.label_key not in table(lang)]
    assert not missing


@pytest.mark.parametrize("key", list(RESIDUAL_SPECS))
def test_validation_reads_each_residuals_constraints(key):
    spec = RESIDUAL_SPECS[key]
    base = ModelConfig(n_layers=2, d_model=32, n_heads=4, vocab_size=50, residual=key)
    if spec.norms:
        for norm in config.NORMS:
            if norm not in spec.norms:
                with pytest.raises(ConfigError, match=f"model.norm={norm!r} is not allowed"):
                    validate_model(replace(base, norm=norm))
        base = replace(base, norm=spec.norms[0], final_norm=spec.norms[0] != "none")
    for placement in config.PLACEMENTS:
        m = replace(base, placement=placement)
        if spec.placements and placement not in spec.placements:
            with pytest.raises(ConfigError, match=f"model.placement={placement!r} is not allowed"):
                validate_model(m)
        else:
            assert validate_model(m) is m
    wide = replace(base, streams=2, placement=spec.placements[0] if spec.placements else "pre")
    if spec.widens == "copies":
        assert validate_model(wide) is wide
    else:
        with pytest.raises(ConfigError, match="model.streams=2 needs model.residual"):
            validate_model(wide)


@pytest.mark.parametrize("key", list(RESIDUAL_SPECS))
def test_write_scale_and_memory_read_the_spec(key):
    spec = RESIDUAL_SPECS[key]
    m = ModelConfig(n_layers=3, d_model=32, n_heads=4, vocab_size=50, residual=key,
                    streams=4 if spec.widens == "copies" else 1,
                    placement=spec.placements[0] if spec.placements else "pre")
    assert m.write_scale == spec.write_scale(6)
    assert (m.out_proj_std == m.init_std) == spec.own_depth_init  # scaled_init is on
    floats = memory.residual_floats(m)
    assert floats == spec.wide_floats(32, m.streams, 6)
    assert (floats > 0) == bool(spec.widens)  # only a wider stream keeps more


@pytest.mark.parametrize("key", [k for k in NORM_SPECS if k != "none"])
def test_each_norms_parameters_are_the_built_modules(key):
    module = NORM_CLASSES[key](24, 1e-5)
    assert sum(p.numel() for p in module.parameters()) == NORM_SPECS[key].params(24)


def test_hf_export_flags_are_the_families_tables():
    """A spec's hf_export says what `hf export` writes: the exported families' switch."""
    from depthlab.hf.mapping import EXPORT_ORDER, FAMILIES

    def exported(switch: str) -> set:
        return {s.value for n in EXPORT_ORDER for s in FAMILIES[n].switches if s.ours == switch}

    assert {k for k, s in RESIDUAL_SPECS.items() if s.hf_export} == exported("residual")
    assert {k for k, s in NORM_SPECS.items() if s.hf_export} == exported("norm")


def test_published_specs_are_json_and_carry_no_code():
    import json

    specs = public_specs()
    assert json.loads(json.dumps(specs)) == specs
    assert all(isinstance(v, (str, bool, list)) for s in specs["residuals"] for v in s.values())


# The spec table loaded first and alone, so a test can add an entry before the config,
# the model and the page read it.
LOAD_VARIANTS = textwrap.dedent("""
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("depthlab.variants", "depthlab/variants.py")
    variants = importlib.util.module_from_spec(spec)
    sys.modules["depthlab.variants"] = variants
    spec.loader.exec_module(variants)
""")


# A residual that exists only in this test: x <- x + F(x) / 2, added the way the recipe in
# docs/architecture.md says (a spec and a registry entry), before anything reads them.
NEW_RESIDUAL = LOAD_VARIANTS + textwrap.dedent("""
    variants.RESIDUAL_SPECS["_test_half"] = variants.ResidualSpec(
        "_test_half", "x ← x + F(x) / 2", "nothing to initialise", write_scale=lambda writes: 0.5)

    from depthlab.model import residual
    residual.RESIDUAL_BUILDERS["_test_half"] = lambda cfg: residual.ScaledResidual(cfg.write_scale)

    from depthlab.config import RESIDUALS, ModelConfig, validate_model
    from depthlab.errors import UserError
    from depthlab.hf.config_map import export_family
    from depthlab.memory import estimate
    from depthlab.model.decode import _config_reason
    from depthlab.model.transformer import Transformer
    from depthlab.probes.simulator import StackRequest, compare
    from depthlab.web.lesson import page_facts
    from depthlab.web.schemas import SimulateRequest

    m = validate_model(ModelConfig(n_layers=2, d_model=32, n_heads=4, vocab_size=50, residual="_test_half"))
    out = {"config": "_test_half" in RESIDUALS, "write_scale": m.write_scale,
           "built": Transformer(m).blocks[0].attn_residual.write_scale,
           "memory": estimate(m, 2, 8, True).total > 0,
           "schema": SimulateRequest(residual="_test_half").residual,
           "meta": page_facts()["simulator"]["formulas"]["_test_half"], "decode": _config_reason(m)}
    # 4 writes: scaled's 1/sqrt(4) is the new residual's 1/2, on the same weights
    half, scaled = (compare(StackRequest(residual=r, depth=4), "gradient").improved
                    for r in ("_test_half", "scaled"))
    out["simulator"] = [half.grad_norm == scaled.grad_norm, half.stream_rms == scaled.stream_rms]
    try:
        export_family(m)
        out["hf"] = "exported"
    except UserError as e:
        out["hf"] = str(e)
    print(json.dumps(out))
""")


def run_fresh(script: str) -> dict:
    """The JSON a script prints last, run in a fresh interpreter (its registry additions
    must not leak into other tests)."""
    import json

    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                                                       "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_new_residual_is_its_spec_and_its_registry_entry():
    out = run_fresh(NEW_RESIDUAL)
    assert out["config"] and out["write_scale"] == 0.5 and out["built"] == 0.5
    assert out["memory"] and out["schema"] == "_test_half" and out["simulator"] == [True, True]
    assert out["meta"] == "x ← x + F(x) / 2"
    assert out["decode"] == "model.residual=_test_half, which the decode step does not implement"
    assert out["hf"].startswith('model.residual="_test_half" has no Hugging Face equivalent')


# A norm that exists only in this test, x / max|x| * w, added the same way.
NEW_NORM = LOAD_VARIANTS + textwrap.dedent("""
    variants.NORM_SPECS["_test_maxnorm"] = variants.NormSpec(
        "_test_maxnorm", "MaxNorm", "x / max|x| · w", "w = 1", params=lambda d: d)

    import torch
    from torch import nn
    from depthlab.model import norms

    class MaxNorm(nn.Module):
        def __init__(self, dim, eps):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))
        def reset_parameters(self):
            nn.init.ones_(self.weight)
        def forward(self, x):
            return x / x.abs().amax(-1, keepdim=True) * self.weight

    norms.NORM_CLASSES["_test_maxnorm"] = MaxNorm

    from depthlab.config import NORM_LABELS, NORMS, ModelConfig, validate_model
    from depthlab.errors import UserError
    from depthlab.hf.config_map import export_family
    from depthlab.model.decode import _config_reason
    from depthlab.model.transformer import Transformer
    from depthlab.web.lesson import page_facts

    m = validate_model(ModelConfig(n_layers=2, d_model=32, n_heads=4, vocab_size=50, norm="_test_maxnorm"))
    model = Transformer(m)
    logits = model(torch.zeros(1, 5, dtype=torch.long))
    out = {"config": "_test_maxnorm" in NORMS, "label": NORM_LABELS["_test_maxnorm"],
           "finite": bool(torch.isfinite(logits).all()), "decode": _config_reason(m),
           "meta": [s["label"] for s in page_facts()["variants"]["norms"] if s["key"] == "_test_maxnorm"]}
    try:
        export_family(m)
        out["hf"] = "exported"
    except UserError as e:
        out["hf"] = str(e)
    print(json.dumps(out))
""")


def test_a_new_norm_is_its_spec_and_its_registry_entry():
    out = run_fresh(NEW_NORM)
    assert out["config"] and out["label"] == "MaxNorm" and out["meta"] == ["MaxNorm"]
    assert out["finite"]
    assert out["decode"] == "model.norm=_test_maxnorm, which the decode step does not implement"
    assert out["hf"].startswith('model.norm="_test_maxnorm" has no Hugging Face equivalent')


def test_the_spec_table_and_its_torch_free_readers_load_no_torch():
    code = ("import sys, depthlab.variants, depthlab.config, depthlab.memory, "
            "depthlab.probes.simulator_bounds, depthlab.experiments.frontier_arms; "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_shortcut_specs_are_the_config_switches_and_hf_fixes_them_off():
    """Each stream shortcut's spec names a ModelConfig field whose default is its `off`
    value, which old run hashes assume and every exported family fixes."""
    import dataclasses

    from depthlab.hf.mapping import EXPORT_ORDER, FAMILIES
    from depthlab.rundir import ADDED_FIELDS
    from depthlab.variants import SHORTCUT_SPECS

    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    for key, spec in SHORTCUT_SPECS.items():
        assert key == spec.key and defaults[key] == spec.off
        assert ADDED_FIELDS[f"model.{key}"] == spec.off
        fixed = {s.value for n in EXPORT_ORDER for s in FAMILIES[n].switches if s.ours == key}
        assert not spec.hf_export and fixed == {spec.off}
