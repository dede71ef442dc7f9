"""The page's real-model API: every run directory under `--runs`, and the real-model
probes (`depthlab.probes.realmodel`) of one run on one prompt.

Each (run, prompt, target) is computed once and kept on disk under
RUNS/.cache/realmodel/, keyed by the run's weights (path, size, modification time): a
cached view is one file read, and a retrained or re-imported run is measured again.
The model and tokenizer of a run are loaded once per server and kept (`LoadedRuns`, at
most MODELS_KEPT, keyed by the same fingerprint), so a new prompt costs its probes only.
A cached view is read on the cheap path and sent as the file's bytes; a computation
runs on the server's heavy pool (depthlab.web.pool) under this router's own lock, one
real-model probe at a time.

    GET  /api/realmodel/runs     the runs the page can probe
    GET  /api/realmodel/prompts  shipped prompts (en, zh) and each section's question
    POST /api/realmodel/probe    {"run", "prompt", "target"?} -> the probes, cached
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from depthlab import rundir
from depthlab.corpus import LANGUAGES
from depthlab.dcp import DCP_METADATA
from depthlab.errors import UserError
from depthlab.locales import joined, marked, texts
from depthlab.progress import Progress
from depthlab.web.messages import refusal
from depthlab.web.pool import HeavyPool
from depthlab.web.schemas import error_responses

MAX_PROMPT_CHARS = 400
MAX_PROMPT_TOKENS = 128  # the ablation runs one forward pass per block over these
MAX_RUN_DEPTH = 3  # runs/NAME, runs/GROUP/NAME, runs/EXPERIMENT/runs/NAME
MODELS_KEPT = 2  # loaded runs a server keeps (SmolLM2: 540 MB each)
CACHE_DIR = Path(".cache") / "realmodel"
STATIC_RUN = "smollm2"  # what `depthlab lab` imports: the run a static page shows
CACHE_VERSION = 6  # 2: the gradient section and its reading; 3: tokens as text, the lens reading;
# 4: the stream's path, the writes' direct contributions, the lens grid, attention maps;
# 5: the readings' token fields kept apart ("parts"); 6: the block removals' losses and
# the lens grid's logsumexps in float32, the cached-scale lens rescaled (numbers move by
# about 1e-7)
# Imported models the lab knows the training language of (a lowercase part of the source's
# name or path): SmolLM2's corpus is mostly English web text, code and maths.
IMPORTED_LANGUAGES = (("smollm", "en"),)

PROMPTS = [
    {"id": "paris", "lang": "en", "text": "The capital of France is", "target": " Paris"},
    {"id": "residual", "lang": "en", "text": "The residual stream carries information from the "
     "bottom of a deep network to the top. Each block reads the stream, computes an update, "
     "and adds it back.", "target": None},
    {"id": "shakespeare", "lang": "en", "text": "ROMEO:\nBut, soft! what light through yonder "
     "window breaks?", "target": None},
    {"id": "paris-zh", "lang": "zh", "text": "法国的首都是巴黎，英国的首都是", "target": None},
    {"id": "residual-zh", "lang": "zh", "text": "残差连接把每一层的输出加回到残差流上，"
     "让信息和梯度都能直达底层。", "target": None},
]

SECTIONS = ("stream", "path", "dla", "attention", "maps", "massive", "collapse", "gradient",
            "lens", "grid", "ablation")


def questions() -> dict[str, dict[str, str]]:
    """Each section's question in every language (locales/*/page.json, rm.q.*)."""
    return {name: texts(f"rm.q.{name}") for name in SECTIONS}


class ProbeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run: str = Field(min_length=1, max_length=200, description="a name from /api/realmodel/runs")
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    target: str | None = Field(None, min_length=1, max_length=40,
                               description="the lens's token, taken verbatim (' cold' and "
                               "'cold' are different tokens); a text of several tokens is "
                               "scored by its first; default: the model's own top-1")


def list_runs(root: Path) -> list[dict[str, Any]]:
    """Every directory under `root` (up to three levels) with config.json and weights."""
    out = []
    if not root.is_dir():
        return out
    found = sorted({p.parent for depth in range(1, MAX_RUN_DEPTH + 1)
                    for p in root.glob("/".join(["*"] * depth) + "/" + rundir.CONFIG_FILE)
                    if not any(part.startswith(".") for part in p.relative_to(root).parts)})
    for run in found:
        if rundir.weights_source(run) is None:  # model.safetensors, or an fsdp run's DCP folder
            continue
        try:
            cfg, record = rundir.read_config(run)
        except Exception:  # a run being written or a foreign config.json: not listed
            continue
        source = record.get("source") or {}
        m = cfg.model
        known = f"{source.get('name') or ''} {source.get('path') or ''}".lower()
        lang = (next((lang for part, lang in IMPORTED_LANGUAGES if part in known), None)
                if source else LANGUAGES.get(cfg.data.corpus))
        out.append({"name": run.relative_to(root).as_posix(),
                    "kind": {"gguf": "gguf", "huggingface": "huggingface"}.get(
                        source.get("format"), "trained"),
                    "source": source.get("name") or source.get("path"),
                    "n_layers": m.n_layers, "d_model": m.d_model, "n_heads": m.n_heads,
                    "vocab_size": m.vocab_size, "trained_on": lang,
                    "tokenizer": (run / rundir.TOKENIZER_FILE).is_file()})
    return out


def _weights_fingerprint(run: Path) -> str:
    return _fingerprint(rundir.weights_source(run) or run / rundir.WEIGHTS_FILE)


def _fingerprint(weights: Path) -> str:
    """Where the weights are and when they were written: a file's, or a DCP folder's
    index (a checkpoint folder is renamed into place whole, with a new step name)."""
    st = (weights / DCP_METADATA if weights.is_dir() else weights).stat()
    return f"{weights.resolve()}:{st.st_size}:{st.st_mtime_ns}"


class LoadedRuns:
    """The runs a server has loaded (model, config, tokenizer), the most recently used
    MODELS_KEPT of them, each under its weights' and tokenizer's fingerprint: a run whose
    files changed is loaded again, never answered from the old model."""

    def __init__(self, kept: int = MODELS_KEPT) -> None:
        self.kept = kept
        self._runs: OrderedDict[tuple[str, ...], tuple[Any, Any, Any]] = OrderedDict()
        self.loads = 0  # how many times a run was read from disk

    def get(self, run: Path) -> tuple[Any, Any, Any]:
        tok = run / rundir.TOKENIZER_FILE
        key = (str(run.resolve()), _weights_fingerprint(run),
               _fingerprint(run / rundir.CONFIG_FILE), _fingerprint(tok) if tok.is_file() else "")
        if key in self._runs:
            self._runs.move_to_end(key)
            return self._runs[key]
        for old in [k for k in self._runs if k[0] == key[0]]:  # the run as it was before
            del self._runs[old]
        while len(self._runs) >= self.kept:  # dropped before the next one is read
            self._runs.popitem(last=False)
        model, cfg = rundir.load_model(run)
        self.loads += 1
        self._runs[key] = (model, cfg, rundir.load_tokenizer(run))
        return self._runs[key]


class RealModelProbes:
    """The runs directory, the runs loaded, and the on-disk cache of probe results."""

    def __init__(self, root: Path, lock: threading.Lock) -> None:
        self.root = Path(root)
        self.lock = lock
        self.loaded = LoadedRuns()

    def run_dir(self, name: str) -> Path:
        names = [r["name"] for r in list_runs(self.root)]
        if name not in names:
            if not names:
                raise refusal("err.unknown_run_none", 404, name=repr(name), root=str(self.root))
            raise refusal("err.unknown_run", 404, name=repr(name), shown=", ".join(names[:12]))
        return self.root / name

    def readable(self, name: str) -> dict[str, bool]:
        """Which shipped prompts the run's tokenizer reads into 2..MAX_PROMPT_TOKENS tokens."""
        run = self.run_dir(name)
        tok = run / rundir.TOKENIZER_FILE
        stamp = tok.stat().st_mtime_ns if tok.is_file() else None
        return dict(_readable(str(run), stamp))

    def cache_path(self, run: Path, req: ProbeRequest) -> Path:
        key = json.dumps([CACHE_VERSION, _weights_fingerprint(run), req.prompt,
                          req.target], ensure_ascii=False)
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
        return self.root / CACHE_DIR / f"{digest}.json"

    def cached_json(self, req: ProbeRequest) -> bytes | None:
        """The probe's answer as JSON, from the disk cache, or None: one file read, no
        torch, and no parse (the server sends the bytes; encoding SmolLM2's answer of a
        few hundred KB again took 0.15 s on the event loop)."""
        try:
            text = self.cache_path(self.run_dir(req.run), req).read_bytes()
        except OSError:
            return None
        if not (text.startswith(b"{") and text.endswith(b"}")):  # not a whole answer
            return None
        return text[:-1] + b', "cached": true}'

    def probe_json(self, req: ProbeRequest) -> bytes:
        """`probe` as JSON bytes, encoded on the calling thread (a worker's)."""
        return json.dumps(self.probe(req), ensure_ascii=False, allow_nan=False).encode("utf-8")

    def probe(self, req: ProbeRequest) -> dict[str, Any]:
        run = self.run_dir(req.run)
        path = self.cache_path(run, req)
        cached = _read(path)
        if cached is not None:
            return {**cached, "cached": True}
        with self.lock:
            cached = _read(path)  # computed by the request we waited for
            if cached is not None:
                return {**cached, "cached": True}
            result = self._compute(run, req)
        body = {"run": req.run, "prompt": req.prompt, "target": req.target,
                "questions": questions(), "readings": readings(result), "result": result}
        rundir.atomic_write_text(path, json.dumps(body, ensure_ascii=False, allow_nan=False))
        return {**body, "cached": False}

    def _compute(self, run: Path, req: ProbeRequest) -> dict[str, Any]:
        from depthlab.probes.realmodel import probe_loaded

        model, cfg, tokenizer = self.loaded.get(run)
        if tokenizer is None:
            raise refusal("err.no_tokenizer", run=req.run)
        try:
            n = len(tokenizer.encode(req.prompt))
        except UserError as e:
            raise refusal("err.prompt_unreadable", detail=str(e)) from None
        if not 2 <= n <= MAX_PROMPT_TOKENS:
            raise refusal("err.prompt_tokens", max=MAX_PROMPT_TOKENS, n=n)
        result = probe_loaded(model, cfg, tokenizer, run, req.prompt, target=req.target)
        result["run"] = req.run  # the name, not this machine's path
        return result


@functools.lru_cache(maxsize=32)
def _readable(run: str, stamp: int | None) -> tuple[tuple[str, bool], ...]:
    """(prompt id, readable) for one run's tokenizer as it is at `stamp` (its mtime)."""
    tokenizer = rundir.load_tokenizer(Path(run)) if stamp is not None else None
    out = []
    for p in PROMPTS:
        try:
            n = len(tokenizer.encode(p["text"])) if tokenizer is not None else 0
        except UserError:
            n = 0
        out.append((p["id"], 2 <= n <= MAX_PROMPT_TOKENS))
    return tuple(out)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def readings(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One line per section, in every language: the table's rm.read.* templates filled
    with the probe's numbers (the mean, the largest and the argmax are taken here). A
    reading that quotes a token also carries its "parts" (locales.marked), so the page
    sets the token as code from the data, never by looking for quotes in the sentence."""
    from depthlab.probes.realmodel import lens_sentence  # torch: only once a probe exists

    a, m, s, lens, ab = r["attention"], r["massive"]["largest"], r["stream"], r["lens"], r["ablation"]
    rms = [v for v in s["rms"] if v is not None]
    worst = max(range(len(ab["delta_loss"])), key=lambda i: ab["delta_loss"][i])
    grads = r["grad_norm"]
    peak = max(range(len(grads)), key=lambda i: grads[i])
    target = repr(lens.get("target", lens["target_id"]))
    tokens = r.get("tokens")
    first_tok = repr(tokens[0]) if tokens else f"id {r['prompt_ids'][0]}"
    big_tok = repr(tokens[m["token"]]) if tokens else f"id {r['prompt_ids'][m['token']]}"
    return {
        "stream": texts("rm.read.stream", first=f"{rms[0]:.3g}", peak=f"{max(rms):.3g}",
                        expected=f"{s['rms_expected'][-1]:.3g}"),
        "attention": texts("rm.read.attention_none") if a is None else
        marked("rm.read.attention", {"token": first_tok}, uniform=f"{a['uniform']:.0%}",
               share=f"{sum(a['layer_share']) / len(a['layer_share']):.0%}"),
        "massive": marked("rm.read.massive", {"text": big_tok}, value=f"{m['value']:.4g}", dim=m["dim"],
                          token=m["token"], ratio=f"{m['ratio']:.3g}"),
        "collapse": texts("rm.read.collapse", cos=f"{s['mean_cosine'][-1]:.2f}"),
        "gradient": texts("rm.read.gradient", ratio=f"{r['ratio']:.3g}", peak=r["sublayers"][peak]),
        "lens": lens_sentence(target, lens["stays_top1"], lens["first_top1"]),
        "ablation": texts("rm.read.ablation", block=worst, delta=f"{ab['delta_loss'][worst]:.2f}"),
        **stream_readings(r),
    }


def _tok(r: dict[str, Any], position: int) -> str:
    tokens = r.get("tokens")
    return repr(tokens[position]) if tokens else f"id {r['prompt_ids'][position]}"


def _name(r: dict[str, Any], k: int) -> str:
    """A state's or a write's name as the page labels it (block.sublayer; 0 = embedding)."""
    return r["path"]["states"][k]


SEP = {"en": " ", "zh": ""}  # between two sentences of a reading


def stream_readings(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The readings of the four views of the stream as a sum of writes."""
    p, d, g, a = r["path"], r["dla"], r["lens_grid"], r["attention"]
    out = {"path": marked("rm.read.path", {"tok": _tok(r, p["position"])}, pos=p["position"],
                          share=f"{p['variance_2d']:.0%}", k=p["longest"],
                          name=_name(r, p["longest"]))}
    if d["available"]:
        top = d["top"][0]
        text = (g.get("text") or {}).get(str(d["target_id"]))
        key = "rm.read.dla_embed" if top["k"] == 0 else "rm.read.dla"
        writes = sum(t not in ("embed", "backout") for t in d["terms"])  # backout: a term, no write
        out["dla"] = marked(key, {"target": repr(text) if text is not None else f"id {d['target_id']}"},
                            n=writes, sum=f"{d['sum']:.4f}",
                            logit=f"{d['logit']:.4f}", gap=f"{d['gap']:.1e}", top=top["term"],
                            value=f"{top['value']:+.2f}", share=f"{top['value'] / d['logit']:.0%}"
                            if d["logit"] else "-")
        if d.get("softcap") is not None:  # the terms add up to the logit before the cap
            out["dla"] = joined(out["dla"], texts("rm.read.dla_cap", cap=f"{d['softcap']:g}"), SEP)
    else:
        out["dla"] = texts("rm.read.dla_none")
    # the last position's top-1 in the top row, and the lowest row from which it stays top-1
    last = [row[-1][0] for row in g["top_id"]]
    row = len(last) - 1
    while row > 0 and last[row - 1] == last[-1]:
        row -= 1
    text = (g.get("text") or {}).get(str(last[-1]))
    tok = {"tok": repr(text) if text is not None else f"id {last[-1]}"}
    out["grid"] = marked("rm.read.grid", tok, block=row - 1, p=f"{g['top_prob'][-1][-1][0]:.0%}") \
        if row > 0 else marked("rm.read.grid_embed", tok)
    if a is None:  # every layer Gated DeltaNet: no softmax weights anywhere
        out["maps"] = texts("rm.read.maps_none")
        return out
    shares = a["first_token_share"]
    i, head = max(((i, j) for i in range(len(shares)) for j in range(len(shares[i]))),
                  key=lambda ij: shares[ij[0]][ij[1]])
    half = sum(v > 0.5 for row in shares for v in row)
    layer = a["layers"][i]  # a hybrid's shares are its attention layers' only
    out["maps"] = marked("rm.read.maps", {"tok": _tok(r, 0)}, layer=layer, head=head,
                         share=f"{shares[i][head]:.0%}", n=half, total=sum(map(len, shares)))
    return out


def prompts_body() -> dict[str, Any]:
    return {"prompts": PROMPTS, "questions": questions(), "max_prompt_chars": MAX_PROMPT_CHARS,
            "max_prompt_tokens": MAX_PROMPT_TOKENS}


def static_key(run: str, prompt: str, target: str | None) -> str:
    """How a static page finds a result: the same string as the page's
    JSON.stringify([run, prompt, target])."""
    return json.dumps([run, prompt, target], ensure_ascii=False, separators=(",", ":"))


def static_results(root: Path, progress: bool = False) -> dict[str, Any]:
    """What `export-page` embeds: the shipped prompts probed on one run (SmolLM2 when it
    is under `root`, else the first run listed), computed now or read from the cache.
    A typed prompt or another run needs the server; the page says so."""
    runs = list_runs(root)
    out: dict[str, Any] = {**prompts_body(), "runs": [], "results": {}}
    if not runs:
        return out
    pick = next((r for r in runs if r["name"] == STATIC_RUN), runs[0])
    probes = RealModelProbes(root, threading.Lock())
    bar = Progress(len(PROMPTS), desc=f"export-page: probing {pick['name']} on the shipped prompts",
                   unit="prompt", enabled=progress, each_item=True)
    for i, p in enumerate(PROMPTS):
        try:
            body = probes.probe(ProbeRequest(run=pick["name"], prompt=p["text"], target=p["target"]))
        except UserError:  # a prompt this run's tokenizer cannot read: left out
            continue
        finally:
            bar.report(i + 1)
        out["results"][static_key(pick["name"], p["text"], p["target"])] = {**body, "cached": True}
    bar.close()
    if out["results"]:
        out["runs"] = [pick]
    return out


def router(root: Path, pool: HeavyPool) -> APIRouter:
    probes = RealModelProbes(root, threading.Lock())
    api = APIRouter(prefix="/api/realmodel", tags=["real model"])

    @api.get("/runs", summary="Run directories under --runs (trained, imported) the probes read")
    def runs() -> list[dict]:
        return list_runs(probes.root)

    @api.get("/prompts", summary="Shipped prompts (en, zh) and each section's question; with "
             "?run=NAME each prompt says whether that run's tokenizer can read it",
             responses=error_responses(404))
    def prompts(run: Annotated[str | None, Query(max_length=200)] = None) -> dict:
        body = prompts_body()
        if run is not None:
            ok = probes.readable(run)
            body["prompts"] = [{**p, "readable": ok[p["id"]]} for p in PROMPTS]
        return body

    @api.post("/probe", summary="The real-model probes of one run on one prompt (cached on disk)",
              responses=error_responses(400, 404, 503))
    async def probe(req: Annotated[ProbeRequest, Body()]) -> dict:
        found = await run_in_threadpool(probes.cached_json, req)
        body = found if found is not None else await pool.run(probes.probe_json, req)
        return Response(body, media_type="application/json")  # type: ignore[return-value]

    return api
