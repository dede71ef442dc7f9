"""Token ids as text a reader can read, on byte-level tokenizers too.

A byte-level BPE (GPT-2, SmolLM2, the course's own) cuts a Chinese character's three
UTF-8 bytes across tokens: decoded alone, each token is '�'. Here the tokens of a
sequence are grouped into pieces that end on character boundaries: a character split
over tokens is shown once, merged, with each token's own part kept for a hover
(`<0xE5><0xA5> + <0xBD>`); a byte that never completes a character is shown as the
byte, `<0xE5>`, never as '�'. Special tokens (`<|im_start|>`) stand alone by name.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte tokens


@functools.cache
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte <-> printable character table, inverted: character -> byte. The
    printable Latin-1 bytes stand for themselves; the other 68 are shifted to 256 + n."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: b for b in keep}
    n = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + n
            n += 1
    return {chr(c): b for b, c in chars.items()}


def bytes_text(data: bytes) -> str:
    """`data` decoded as UTF-8, each byte that is not part of a whole character as <0xHH>."""
    text = data.decode("utf-8", "surrogateescape")  # a stray byte b -> U+DC00 + b
    return "".join(f"<0x{ord(c) - 0xDC00:02X}>" if "\udc80" <= c <= "\udcff" else c for c in text)


def _is_byte_level(hf: Any) -> bool:
    return type(getattr(hf, "decoder", None)).__name__ == "ByteLevel"


def token_bytes(tokenizer: Any, i: int, added: dict | None = None) -> bytes | None:
    """The bytes token `i` stands for, or None for a special or added token, which is
    shown by its own name and never merged with its neighbours (an id the tokenizer does
    not have, which a model with a larger vocabulary can predict, as <id i>). `added`: the tokenizer's
    added tokens (id -> token), when the caller has them already."""
    hf = getattr(tokenizer, "hf", None)
    if hf is None:  # a character tokenizer: one whole character per token
        if not 0 <= i < tokenizer.vocab_size:  # a model may have more ids than its tokenizer
            return None
        return tokenizer.token_str(i).encode("utf-8")
    if i in (hf.get_added_tokens_decoder() if added is None else added):
        return None
    piece = hf.id_to_token(i)
    if piece is None:
        return None
    fallback = _BYTE_FALLBACK.fullmatch(piece)
    if fallback:
        return bytes([int(fallback.group(1), 16)])
    alphabet = _byte_level_alphabet()
    if _is_byte_level(hf) and all(c in alphabet for c in piece):
        return bytes(alphabet[c] for c in piece)
    return hf.decode([i]).encode("utf-8")


@dataclass(frozen=True)
class Piece:
    """Tokens start..stop - 1 shown as one piece of text."""

    text: str  # the characters; a stray byte as <0xHH>
    start: int  # the first token's position (0-based, as the hooks count)
    stop: int  # one past the last token's position
    parts: tuple[str, ...]  # each token's own part, bytes that are no character as <0xHH>

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "start": self.start, "stop": self.stop, "parts": list(self.parts)}


def _split_run(run: list[tuple[int, bytes]]) -> list[Piece]:
    """Consecutive byte tokens (position, bytes) -> pieces that end on character boundaries."""
    data = b"".join(b for _, b in run)
    bounds = {0}  # byte offsets where a character (or a stray byte) starts or the run ends
    offset = 0
    for c in data.decode("utf-8", "surrogateescape"):
        offset += 1 if "\udc80" <= c <= "\udcff" else len(c.encode("utf-8"))
        bounds.add(offset)
    out: list[Piece] = []
    group: list[tuple[int, bytes]] = []
    begin = end = 0
    for pos, b in run:
        group.append((pos, b))
        end += len(b)
        if end in bounds:
            out.append(Piece(bytes_text(data[begin:end]), group[0][0], pos + 1,
                             tuple(bytes_text(g) for _, g in group)))
            group, begin = [], end
    return out


def pieces(tokenizer: Any, ids: list[int]) -> list[Piece]:
    """The pieces of text a token sequence shows as: every position in exactly one piece,
    in order; a piece is more than one token only where a character spans tokens."""
    hf = getattr(tokenizer, "hf", None)
    added = hf.get_added_tokens_decoder() if hf is not None else {}
    out: list[Piece] = []
    run: list[tuple[int, bytes]] = []
    for pos, i in enumerate(ids):
        b = token_bytes(tokenizer, i, added)
        if b is not None:
            run.append((pos, b))
            continue
        out += _split_run(run)
        run = []
        name = added[i].content if i in added else f"<id {i}>"
        out.append(Piece(name, pos, pos + 1, (name,)))
    return out + _split_run(run)


def token_text(tokenizer: Any, i: int) -> str:
    """One token alone: its text, a byte that is no whole character as <0xHH>."""
    return "".join(p.text for p in pieces(tokenizer, [i]))


def position_labels(tokenizer: Any, ids: list[int]) -> list[str]:
    """One label per position: the piece it belongs to, and where that piece spans several
    tokens, this token's own part after it in brackets ('好 [<0xBD>]')."""
    out: list[str] = []
    for p in pieces(tokenizer, ids):
        for k in range(p.start, p.stop):
            own = p.parts[k - p.start]
            out.append(p.text if p.stop - p.start == 1 else f"{p.text} [{own}]")
    return out


def bare_ids(tokenizer: Any, text: str) -> list[int]:
    """The ids of `text` alone: without the BOS (or other special tokens) a tokenizer's
    post-processor may add around it, so that a lens target's first token is its own."""
    hf = getattr(tokenizer, "hf", None)
    if hf is None:
        return tokenizer.encode(text)
    return hf.encode(text, add_special_tokens=False).ids
