"""The server's refusals, in the page's language.

Every error the page's server answers is a locale key (`err.*`, in
depthlab/locales/<lang>/errors.json) plus its parameters, so the page reads it in
the language it is shown in, from the same tables as every other sentence. The page
names its language in `Accept-Language` (it sends `en` or `zh` with every request);
a client that sends none (curl, scripts, the CLI's tests) gets English. The body is

    {"error": "<the sentence in that language>", "code": "err.…", "params": {...}}

and a 422 adds `detail`, one entry per field, each with its own message, code and
params. The CLI never comes here: its `UserError` messages stay English.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from depthlab.errors import UserError
from depthlab.locales import LANGS, table, text

Params = dict[str, str | int | float]


class RunError(Exception):
    """A refusal with its HTTP status: no such experiment or run (404), one at a time (409)."""

    def __init__(self, status: int, message: str, *, key: str | None = None,
                 params: Params | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.key = key
        self.params = params or {}


def refusal(key: str, status: int | None = None, **params: str | int | float) -> Exception:
    """The exception for `key`: a UserError (400), or a RunError when `status` is given;
    its message is the English sentence, its key and params render any language."""
    message = text(key, "en", **params)
    if status is None:
        return UserError(message, key=key, params=params)
    return RunError(status, message, key=key, params=params)


def request_lang(headers: Mapping[str, str]) -> str:
    """The language the client asked for: of the tags of `Accept-Language` that are ours
    (`zh`, `zh-CN`, `en-US`, ...), the one of highest weight, the first among equals; a
    weight of 0 means "not this one" (RFC 9110). English when none is ours."""
    best, best_q = "en", 0.0
    for part in headers.get("accept-language", "").split(","):
        tag, *params = (p.strip().lower() for p in part.split(";"))
        q = 1.0
        for p in params:
            name, _, value = p.partition("=")
            if name.strip() == "q":
                try:
                    q = min(float(value), 1.0)  # NaN stays NaN: never the best
                except ValueError:
                    q = 0.0
        tag = tag.split("-", 1)[0]
        if tag in LANGS and q > best_q:
            best, best_q = tag, q
    return best


def say(key: str, lang: str, params: Params) -> str:
    """The sentence `key` in `lang` (a key not in the table: the bare key and params,
    which the tests make sure never happens)."""
    template = table(lang).get(key)
    return template.format(**params) if template is not None else f"{key} {params}"


def error_body(key: str, params: Params, lang: str) -> dict:
    return {"error": say(key, lang, params), "code": key, "params": params}


def exception_body(exc: Exception, lang: str) -> dict:
    """The body of a UserError or RunError: its key rendered in `lang`, or (an error raised
    below the server, without a key) its English message inside `err.user`."""
    key = getattr(exc, "key", None)
    if key is None:
        return error_body("err.user", {"message": str(exc)}, lang)
    return error_body(key, dict(exc.params), lang)


# ---- 422: what pydantic found wrong with a request ----------------------------------------
_CTX = ("le", "ge", "lt", "gt", "min_length", "max_length", "expected", "pattern", "piece")


def _choices(expected: str, lang: str) -> str:
    """pydantic's "'en' or 'zh'" in the language's list words."""
    if lang == "en":
        return expected
    return text("err.v.or", lang).join(re.findall(r"'[^']*'", expected) or [expected])


def field_error(error: dict, lang: str) -> dict:
    """One of pydantic's errors as {field, message, type, code, params}. In English the
    message is pydantic's own (its plurals and wording); other languages fill the
    `err.v.<type>` template from the error's context, or quote pydantic inside
    `err.v.invalid` for a type the table does not have."""
    kind = str(error.get("type", "invalid"))
    own = " ".join(str(error.get("msg", "invalid")).split())
    key = f"err.v.{kind}"
    ctx = error.get("ctx") or {}
    params: Params = {"message": own}
    if key in table("en"):
        params = {name: str(ctx[name]) for name in _CTX if name in ctx}
        if "expected" in params:
            params["expected"] = _choices(params["expected"], lang)
    else:
        key = "err.v.invalid"
    message = own if lang == "en" else say(key, lang, params)
    return {"field": _field(error), "message": message, "type": kind, "code": key, "params": params}


def validation_body(errors: list[dict], lang: str) -> dict:
    detail = [field_error(e, lang) for e in _item_errors_first(errors)]
    sep = text("err.sep", lang)
    line = sep.join(text("err.field", lang, field=d["field"], message=d["message"]) for d in detail)
    return {**error_body("err.invalid", {"errors": line}, lang), "detail": detail}


def _item_errors_first(errors: list[dict]) -> list[dict]:
    """pydantic reports a sequence whose every item failed twice: once per item, and again
    as too short (it counts the items that validated). The items say what is wrong; the
    second report would claim nothing was sent."""
    itemised = {tuple(e.get("loc", ()))[:-1] for e in errors
                if e.get("loc") and isinstance(e["loc"][-1], int)}
    return [e for e in errors if not (e.get("type") == "too_short"
                                      and tuple(e.get("loc", ())) in itemised)]


def _field(error: dict) -> str:
    """The field an error is about: `n`, `x.3`, or `body` for unparseable JSON."""
    if error.get("type") == "json_invalid":
        return "body"
    parts = [str(p) for p in error.get("loc", ()) if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"
