"""A model's tokenizer in a fraction of a second: the tokenizers pipeline transformers builds for it, kept in
the cache with its special tokens and chat template, and loaded next time without transformers' tokenizer
classes.

AutoTokenizer spends ~2 s on a 150k-token vocabulary (choosing and importing the class, then rebuilding the
pipeline from the folder's files); the pipeline it ends with is a plain `tokenizers.Tokenizer`, which loads from
its own JSON in a third of that. A snapshot is written only after a probe shows it encodes, decodes and renders
the chat template exactly as the transformers tokenizer does; it is keyed by the folder's tokenizer files
(name, size, mtime) and the versions of transformers and tokenizers, so any change rebuilds it. Chat templates
are rendered as transformers renders them (engine/chat_template_render.py).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from tokenizers import Tokenizer

from .cache_paths import cache_root
from .chat_template_render import render_chat_template

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
# every file a tokenizer class may read from a model folder (config.json: the class it picks)
SOURCE_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                "chat_template.jinja", "chat_template.json", "tokenizer.model", "vocab.json", "merges.txt",
                "config.json")
PROBE_TEXTS = ("", "Hello world, 12345 café\n\tnext line", "  two  spaces,\n\n\nnewlines  ",
               "def f(x):\n    return x ** 2  # 🙂 done\n", "日本語のテキスト Ελληνικά русский текст", "don't stop . ?")
PROBE_CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"},
              {"role": "assistant", "content": "4."}, {"role": "user", "content": "And 3 + 3?"}]


@dataclass(frozen=True)
class Encoded:
    """What calling a transformers tokenizer returns, as far as llmchat reads it."""
    input_ids: list

    def __getitem__(self, key: str):
        if key != "input_ids":
            raise KeyError(key)
        return self.input_ids


class SnapshotTokenizer:
    """The subset of a transformers tokenizer llmchat uses, over the same tokenizers pipeline."""

    def __init__(self, backend, meta: dict) -> None:
        self.backend_tokenizer = backend
        self.chat_template = meta["chat_template"]
        self.special_tokens_map = meta["special_tokens_map"]
        self.all_special_ids = meta["all_special_ids"]
        self.clean_up = meta["clean_up"]
        self.name = meta["class"]

    def __repr__(self) -> str:
        return f"SnapshotTokenizer({self.name})"

    def __call__(self, text: str, add_special_tokens: bool = True) -> Encoded:
        return Encoded(self.encode(text, add_special_tokens=add_special_tokens))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        text = self.backend_tokenizer.decode([ids] if isinstance(ids, int) else list(ids),
                                             skip_special_tokens=skip_special_tokens)
        return _clean_up_tokenization(text) if self.clean_up else text

    def get_vocab(self) -> dict:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.backend_tokenizer.token_to_id(token)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def eos_token_id(self) -> int | None:
        eos = self.special_tokens_map.get("eos_token")
        return None if eos is None else self.backend_tokenizer.token_to_id(eos)

    @property
    def bos_token_id(self) -> int | None:
        bos = self.special_tokens_map.get("bos_token")
        return None if bos is None else self.backend_tokenizer.token_to_id(bos)

    def apply_chat_template(self, conversation, tools=None, documents=None, chat_template: str | None = None,
                            add_generation_prompt: bool = False, continue_final_message=False, tokenize: bool = True,
                            return_dict: bool = True, **kwargs):
        template = self._template(chat_template, tools)
        if not conversation:
            raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
        text = render_chat_template(template, conversation, tools=tools, documents=documents,
                                    add_generation_prompt=add_generation_prompt,
                                    continue_final_message=continue_final_message,
                                    **{**self.special_tokens_map, **kwargs})
        if not tokenize:
            return text
        ids = self.encode(text, add_special_tokens=False)
        return Encoded(ids) if return_dict else ids

    def _template(self, name: str | None, tools) -> str:
        """transformers' choice among a tokenizer's templates (a dict of named ones, or one)."""
        if isinstance(self.chat_template, dict):
            named = self.chat_template
            if name is not None and name in named:
                return named[name]
            if name is None:
                if tools is not None and "tool_use" in named:
                    return named["tool_use"]
                if "default" in named:
                    return named["default"]
                raise ValueError(f"this model has several chat templates and no default: {sorted(named)}")
            return name
        if name is not None:
            return name
        if self.chat_template is None:
            raise ValueError("the tokenizer has no chat template and none was passed")
        return self.chat_template


def _clean_up_tokenization(text: str) -> str:
    """transformers' clean_up_tokenization (spaces before punctuation and contractions)."""
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                          (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(before, after)
    return text


def snapshot_key(folder: Path) -> str:
    """Changes whenever a file the tokenizer is built from, or the libraries that build it, change."""
    files = []
    for name in SOURCE_FILES:
        try:
            st = (folder / name).stat()
        except OSError:
            continue
        files.append([name, st.st_size, st.st_mtime_ns])
    ident = {"folder": str(folder.resolve()), "files": files, "version": SNAPSHOT_VERSION,
             "transformers": version("transformers"), "tokenizers": version("tokenizers")}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]


def snapshot_dir() -> Path:
    return cache_root() / "tokenizers"


def load_snapshot(folder: Path, where: Path | None = None) -> SnapshotTokenizer | None:
    """The folder's snapshot if one was written for exactly these files; None otherwise (or if it is damaged)."""
    where = where or snapshot_dir()
    key = snapshot_key(folder)
    meta_path, backend_path = where / f"{key}.meta.json", where / f"{key}.tokenizer.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("version") != SNAPSHOT_VERSION:
            raise ValueError("another snapshot version")
        backend = Tokenizer.from_file(str(backend_path))
        backend.no_truncation()
        backend.no_padding()
        return SnapshotTokenizer(backend, meta)
    except Exception as exc:  # unreadable or damaged: rebuilt from the folder, as on a first start
        log.warning("tokenizer snapshot %s unusable (%s); loading the tokenizer from the model folder", key, exc)
        for path in (meta_path, backend_path):
            path.unlink(missing_ok=True)
        return None


def save_snapshot(folder: Path, tokenizer, where: Path | None = None) -> bool:
    """Write a snapshot of a loaded transformers tokenizer, if it reproduces it on the probe; any failure only
    logs (the next start loads the slow way again). True when written."""
    where = where or snapshot_dir()
    try:
        backend = tokenizer.backend_tokenizer
        clean_up = bool(tokenizer.clean_up_tokenization_spaces) and not (
            type(backend.model).__name__ == "BPE" and not getattr(
                tokenizer, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False))
        meta = {"version": SNAPSHOT_VERSION, "class": type(tokenizer).__name__,
                "chat_template": tokenizer.chat_template, "special_tokens_map": dict(tokenizer.special_tokens_map),
                "all_special_ids": list(tokenizer.all_special_ids), "clean_up": clean_up}
        pipeline = backend.to_str()   # ~5 MB of JSON on a large vocabulary: serialized once
        candidate = SnapshotTokenizer(Tokenizer.from_str(pipeline), meta)
        mismatch = probe_mismatch(candidate, tokenizer)
    except Exception as exc:  # a tokenizer without a tokenizers pipeline, or one the probe cannot drive
        log.info("tokenizer of %s not snapshotted: %s", folder, exc)
        return False
    if mismatch:
        log.info("tokenizer of %s not snapshotted: it differs from transformers' on %s", folder, mismatch)
        return False
    key = snapshot_key(folder)
    try:
        where.mkdir(parents=True, exist_ok=True)
        # the pipeline first, the meta last: a meta file means a whole snapshot
        for name, text in ((f"{key}.tokenizer.json", pipeline), (f"{key}.meta.json", json.dumps(meta))):
            tmp = where / f"{name}.{os.getpid()}.tmp"
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, where / name)
    except OSError as exc:
        log.warning("tokenizer snapshot not written in %s: %s", where, exc.strerror or exc)
        return False
    return True


def probe_mismatch(ours, theirs) -> str | None:
    """What the snapshot does differently from transformers' tokenizer on the probe, or None."""
    specials = [t for t in theirs.all_special_tokens if isinstance(t, str)][:32]
    texts = list(PROBE_TEXTS) + [f"a{s}b {s}\n{s}" for s in specials]
    for text in texts:
        for add in (True, False):
            want = theirs(text, add_special_tokens=add).input_ids
            if ours(text, add_special_tokens=add).input_ids != want:
                return f"encoding {text!r} (add_special_tokens={add})"
            for skip in (True, False):
                if ours.decode(want, skip_special_tokens=skip) != theirs.decode(want, skip_special_tokens=skip):
                    return f"decoding {text!r} (skip_special_tokens={skip})"
    size = len(theirs)
    for token in range(0, size, max(1, size // 257)):
        if ours.decode([token]) != theirs.decode([token]):
            return f"decoding token {token}"
    if theirs.chat_template is not None:
        for chat in (PROBE_CHAT, PROBE_CHAT[1:2]):
            for prompt in (True, False):
                try:
                    want = theirs.apply_chat_template(chat, tokenize=False, add_generation_prompt=prompt)
                except Exception:  # a template that refuses this chat: both must refuse it
                    want = None
                try:
                    got = ours.apply_chat_template(chat, tokenize=False, add_generation_prompt=prompt)
                except Exception:
                    got = None
                if got != want:
                    return "the chat template"
    return None
