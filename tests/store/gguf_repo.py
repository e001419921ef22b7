"""A GGUF repo for the stand-in Hub, as bartowski-style repos look: one file per quant, a split quant,
a quant the engine cannot run, a README, no config or tokenizer files.

Only the Q8_0 file is a real model (written with the gguf package from a tiny HF folder); the other quants
are copies renamed inside (so each file has its own bytes and hash) that the tests never import.
"""
from __future__ import annotations

from pathlib import Path

from fake_hub import FakeRepo
from gguf_writer import write_llama_gguf
from tiny_models import make_model, make_tokenizer

REAL_QUANT = "Q8_0"


def tiny_gguf(folder: Path) -> Path:
    src = make_model(folder / "src", "llama", vocab_size=len(make_tokenizer()))
    return write_llama_gguf(src, folder / "Tiny-Chat-Q8_0.gguf")


def _variant(data: bytes, tag: bytes) -> bytes:
    """The same GGUF with another general.name of the same length: other bytes, other sha256."""
    assert len(tag) == 5 and data.count(b"tiny-llama") == 1
    return data.replace(b"tiny-llama", b"tiny-" + tag)


def gguf_files(gguf: Path, stem: str = "Tiny-Chat") -> dict[str, bytes]:
    data = gguf.read_bytes()
    q6 = _variant(data, b"q6k__")
    return {
        f"{stem}-Q8_0.gguf": data,
        f"{stem}-Q4_K_M.gguf": _variant(data, b"q4k_m"),
        f"{stem}-IQ4_XS.gguf": _variant(data, b"iq4xs"),
        f"{stem}-Q6_K-00001-of-00002.gguf": q6[:len(q6) // 2],
        f"{stem}-Q6_K-00002-of-00002.gguf": q6[len(q6) // 2:],
        "README.md": b"# Tiny-Chat GGUF\n",
    }


def gguf_repo(repo_id: str, gguf: Path, architecture: str | None = "llama", **kw) -> FakeRepo:
    meta = None if architecture is None else {"architecture": architecture, "total": 100_000, "context_length": 512}
    return FakeRepo(repo_id, gguf_files(gguf), gguf=meta, tags=kw.pop("tags", ["gguf"]), **kw)
