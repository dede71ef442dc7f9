"""The page API's inputs: every field bounded, unknown fields refused.

These bounds are the server's compute budget per request (documented in
docs/page.md): at most 64 sublayers of width 64 on 6 tokens, vectors of at most
64 numbers. The models are frozen, so a request is its own cache key.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic.json_schema import models_json_schema
from pydantic_core import PydanticCustomError

from depthlab.config import DELTANET_REFUSES_RESIDUAL, RESIDUALS
from depthlab.numtext import NumberTextError, parse_numbers
from depthlab.probes.simulator_bounds import (
    HYBRID_KINDS,
    NORMS,
    PAGE_GAINS,
    PAGE_MAX_DEPTH,
    SIM_MIXERS,
    X0_MIX_FORMULA,
)
from depthlab.variants import RESIDUAL_SPECS, keys_where

MAX_N = PAGE_MAX_DEPTH  # the simulator's depth slider
MIN_G, MAX_G = PAGE_GAINS  # the gain slider
MAX_VECTOR = 64  # the norms calculator
# The residuals the two switch rules name (their specs' properties, depthlab.variants).
_X0_MIXED = keys_where(lambda s: s.takes_x0_mix)
_NORM_FREE = keys_where(lambda s: s.needs_no_norm)
DELTANET_REFUSED = keys_where(lambda s: any(applies(s) for applies, _ in DELTANET_REFUSES_RESIDUAL))
MAX_ABS = 1e6
MAX_PATH_N = 64
MAX_GROWTH_WRITES = 256
BUDGETS = ("micro", "quick")  # what the page may start; longer budgets belong on the CLI


def _json_integer(v: object) -> object:
    """JSON has one number type: 3.0 is the integer 3 (as JSON Schema says), "3" is not."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


AS_INTEGER = BeforeValidator(_json_integer)  # after the Field, so the schema keeps its bounds


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # JSON types as the schema says


Request = _Request  # the base of a page section's request model (depthlab.web.sections)


Depth = Annotated[int, Field(ge=1, le=MAX_N, description="N: sublayers in the stack"), AS_INTEGER]
Gain = Annotated[float, Field(ge=MIN_G, le=MAX_G, allow_inf_nan=False,
                              description="g: init gain, weights ~ N(0, g^2/fan_in)")]


_SWITCH_RULES = [
    {"anyOf": [{"properties": {"x0_mix": {"const": False}}},
               {"properties": {"residual": {"enum": list(_X0_MIXED)}}}]},
    {"anyOf": [{"properties": {"norm": {"const": "none"}}},
               {"properties": {"residual": {"not": {"enum": list(_NORM_FREE)}}}}]},
    # a mixer other than attention: never with a residual the model's DeltaNet layer refuses
    {"anyOf": [{"properties": {"mixer": {"const": "attention"}}},
               {"properties": {"residual": {"not": {"enum": list(DELTANET_REFUSED)}}}}]},
]
# ... and only in collapse mode: gradient mode (the default, and the sweep) has no token mixer
_MIXER_IN_COLLAPSE = {"anyOf": [{"properties": {"mixer": {"const": "attention"}}},
                                {"properties": {"mode": {"const": "collapse"}}, "required": ["mode"]}]}


class Switches(_Request):
    """The improved (green) row in the model's vocabulary; none, none is the naive (red) row.

    Two switches depend on the residual; the schema says so (each an anyOf: the switch
    off, or a residual it applies to; an absent field takes its default), so a request
    the schema accepts is one the simulator takes, and one it refuses gets the 400
    documented beside it (depthlab.probes.simulator checks the same two rules)."""

    model_config = ConfigDict(json_schema_extra={"allOf": _SWITCH_RULES})

    residual: Literal[RESIDUALS] = Field(  # type: ignore[valid-type]
        "plain", description="the model's residual, a key of its registry (depthlab.model.residual, "
        "specs in depthlab.variants): "
        + "; ".join(f"{r}: {RESIDUAL_SPECS[r].formula}" for r in RESIDUALS))
    norm: Literal[NORMS] = Field(  # type: ignore[valid-type]
        "none", description="rmsnorm: the model's RMSNorm on each sublayer's input (Pre-Norm)")
    x0_mix: bool = Field(
        False, description=f"the model's x0_mix: before every layer i, {X0_MIX_FORMULA} (x₀ the "
        "input at RMS 1; λ 1.15 → 1.05, μ 0.20 → 0.05 over depth, nanochat's init); only with "
        "residual " + ", ".join(_X0_MIXED) + " (one stream, not kept on the unit sphere), "
        "else refused (400)")
    mixer: Literal[SIM_MIXERS] = Field(  # type: ignore[valid-type]
        "attention", description="collapse mode's token mixer, both rows: attention (random "
        "causal softmax), gated_deltanet (a random one-head gated delta rule, the model's "
        "chunked form) or hybrid (layers repeat " + "/".join(HYBRID_KINDS) + ", the lesson "
        "anchor's 3:1); gradient mode (and the sweep) has no token mixer: anything but "
        "attention is refused there (400), as with a residual the model's DeltaNet layer refuses")


class SimulateRequest(Switches):
    model_config = ConfigDict(json_schema_extra={"allOf": [*_SWITCH_RULES, _MIXER_IN_COLLAPSE]})

    mode: Literal["gradient", "collapse"] = Field(
        "gradient", description="gradient: does the gradient reach the bottom; "
        "collapse: do the tokens become the same")
    n: Depth = 32
    g: Gain = 1.0


class SweepRequest(Switches):
    model_config = ConfigDict(json_schema_extra={"allOf": [
        *_SWITCH_RULES, {"properties": {"mixer": {"const": "attention"}}}]})

    n: Depth = 32


class CompositeRequest(_Request):
    """The composite gain chart: products of HC's and mHC's toy mixing matrices over depth
    (depthlab.probes.simulator_mixing)."""

    streams: Annotated[int, Field(ge=2, le=8, description="n: copies of the stream"),
                       AS_INTEGER] = 4
    depth: Annotated[int, Field(ge=1, le=128, description="writes: matrices multiplied"),
                     AS_INTEGER] = 60
    spread: float = Field(0.2, gt=0.0, le=1.0, allow_inf_nan=False, description="std of the noise on A_r = I")
    draws: Annotated[int, Field(ge=1, le=32, description="seeds: median and min-max over them"),
                     AS_INTEGER] = 16


class PathsRequest(_Request):
    n: Annotated[int, Field(ge=1, le=MAX_PATH_N, description="layers in x_N = (1 + a)^N x_0"),
                 AS_INTEGER] = 2
    a: float = Field(0.5, ge=-10.0, le=10.0, allow_inf_nan=False,
                     description="scalar sublayer F(x) = a x, read exactly as its shortest "
                     "decimal (-0.1 is -1/10)")


class NormsRequest(_Request):
    x: tuple[Annotated[float, Field(ge=-MAX_ABS, le=MAX_ABS, allow_inf_nan=False)], ...] = Field(
        ..., min_length=1, max_length=MAX_VECTOR,
        description=f"the vector, 1 to {MAX_VECTOR} finite numbers, each within +-{MAX_ABS:g}; "
        "an array, or the text typed in the page's box (\"3, 4\", \"3，4\", \"３，４\": "
        "depthlab.numtext)")
    eps: float = Field(1e-5, gt=0.0, le=1.0, allow_inf_nan=False)

    @field_validator("x", mode="before")
    @classmethod
    def _array(cls, x: object) -> object:
        """A JSON array arrives as a list; strict mode takes only a tuple for a tuple. Text
        is read as the page reads its box (full-width digits and commas too)."""
        if isinstance(x, str):
            try:
                return tuple(parse_numbers(x))
            except NumberTextError as e:
                raise PydanticCustomError("number_text", "Input should be numbers separated by "
                                          "commas or spaces; {piece} is not a number",
                                          {"piece": repr(e.piece)}) from None
        if not isinstance(x, (list, tuple)):
            raise PydanticCustomError("vector_type", "Input should be an array of numbers or "
                                      "text like \"3, 4\"")
        return tuple(x)


class GrowthRequest(_Request):
    writes: Annotated[int, Field(ge=1, le=MAX_GROWTH_WRITES, description="writes into the stream"),
                      AS_INTEGER] = 128


class RunRequest(_Request):
    budget: Literal[BUDGETS] = "quick"  # type: ignore[valid-type]


class EmptyRequest(_Request):
    """A section whose answer takes no input (the evolution table)."""


class BlockRequest(_Request):
    preset: str = Field("course", max_length=60, pattern=r"^[A-Za-z0-9_.-]+$",
                        description="a preset name")
    placement: str | None = Field(None, max_length=40, description="another norm placement")


class AnatomyRequest(_Request):
    config: str = Field("course", max_length=60, pattern=r"^[A-Za-z0-9_.-]+$",
                        description="a preset name or a shipped config name")
    tokens: int = Field(5, ge=1, le=64, description="T: tokens in the traced sentence")


# ---- what the API answers when it refuses ------------------------------------------------
class ErrorBody(BaseModel):
    """Every 4xx answer: one line that names the field and what is allowed."""

    error: str = Field(..., description="field: what is wrong and what is allowed, in the "
                       "language of the request's Accept-Language (en, zh; English by default)")
    code: str = Field(..., description="the sentence's locale key (depthlab/locales/*/errors.json)")
    params: dict[str, str | int | float] = Field(..., description="the key's {name} fields")


class FieldError(BaseModel):
    field: str = Field(..., description="`n`, `x.3`, or `body` for the body as a whole")
    message: str
    type: str = Field(..., description="pydantic's error type, e.g. less_than_equal")
    code: str = Field(..., description="the message's locale key")
    params: dict[str, str | int | float]


class ValidationErrorBody(ErrorBody):
    """422: the request did not match the endpoint's schema; one entry per field."""

    detail: list[FieldError]


ERROR_DESCRIPTIONS = {
    400: "the request has the right shape but cannot be used (named in `error`)",
    403: "a POST from another origin, or without the page's token (see docs/page.md)",
    404: "no such experiment or run, or no data for it yet",
    409: "another experiment is already running",
    413: "the request body is larger than 64 KiB",
    415: "a POST whose Content-Type is not application/json",
    422: "the request does not match this endpoint's schema",
    503: "every worker of the server is computing and its queue is full; retry after the "
         "seconds in the Retry-After header",
}
WRITE_METHODS = ("post", "put", "patch", "delete")


def error_responses(*codes: int) -> dict[int | str, dict]:
    """The `responses=` of an endpoint: the schema of each 4xx that the endpoint itself can
    answer (those that the server adds to every endpoint: `document_server_errors`)."""
    return {code: {"model": ValidationErrorBody if code == 422 else ErrorBody,
                   "description": ERROR_DESCRIPTIONS[code]} for code in codes}


def document_server_errors(spec: dict, security_scheme: dict) -> dict:
    """Add to an OpenAPI document the 4xx that the server gives around every endpoint:
    413 to all, 403 and 415 (and the token scheme) to writes, and our 422 body in place of
    FastAPI's to every operation with parameters or a body. Works on routes from any router."""
    _, defs = models_json_schema([(ErrorBody, "serialization"), (ValidationErrorBody, "serialization")],
                                 ref_template="#/components/schemas/{model}")
    components = spec.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.update(defs["$defs"])
    components["securitySchemes"] = security_scheme

    def body(code: int) -> dict:
        model = "ValidationErrorBody" if code == 422 else "ErrorBody"
        return {"description": ERROR_DESCRIPTIONS[code], "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{model}"}}}}

    for operations in spec.get("paths", {}).values():
        for method, op in operations.items():
            codes = [413]
            if method in WRITE_METHODS:
                codes += [403, 415]
                op["security"] = [{name: []} for name in security_scheme]
            if op.get("parameters") or op.get("requestBody"):
                codes.append(422)
            responses = op.setdefault("responses", {})
            for code in codes:
                responses[str(code)] = body(code)
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422, now unused
        schemas.pop(name, None)
    return spec
