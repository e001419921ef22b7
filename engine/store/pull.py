"""`ModelStore.pull`: decide what to download (refusing early what the engine cannot run), then let
download.fetch_files move it into the HF cache. `pull_gguf` does the same for one quant file of a GGUF repo,
then registers it through the store's import.
The Hub client (~0.3 s with its HTTP stack) is imported in the functions that call it: starts never wait for it.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

from .hf_cache import repo_dir
from .download import fetch_files, human_bytes
from .hub import api, endpoint, ensure_online, hub_errors, is_gguf_repo, timeout, token
from .inspect_folder import describe_folder
from .registry import safe_name
from .support import (GGUFQuant, adapter_reason, architecture_reason, base_models, gguf_architecture,
                      gguf_architecture_reason, gguf_quants, quant_name, select_files, weights_reason)
from .types import CorruptDownloadError, OfflineError, StoreError, UnsupportedModelError


class QuantChoiceError(StoreError, ValueError):
    """A GGUF repo pulled without a quant, or with one it does not have; the message lists what it has."""


def cached_snapshot(cache: Path, repo_id: str, revision: str | None) -> Path | None:
    """A complete snapshot already in the cache for this revision (used offline)."""
    rdir = repo_dir(cache, repo_id)
    rev = revision or "main"
    commit = rev
    ref = rdir / "refs" / rev
    if ref.is_file():
        commit = ref.read_text().strip()
    snap = rdir / "snapshots" / commit
    if snap.is_dir() and describe_folder(snap).complete:
        return snap
    return None


def _fetch_json(repo_id: str, filename: str, commit: str) -> dict | None:
    """A small JSON file read into memory (not the cache): decide before downloading anything."""
    # huggingface_hub's helpers (~0.1 s): when the Hub is used, not whenever the store is imported
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status
    url = hf_hub_url(repo_id, filename, revision=commit, endpoint=endpoint())
    resp = get_session().get(url, headers=build_hf_headers(token=token(), library_name="llmchat"),
                             timeout=timeout())
    hf_raise_for_status(resp)
    try:
        return json.loads(resp.content)
    except ValueError:
        return None


def plan(repo_id: str, revision: str | None) -> tuple[str, str, list[str], dict]:
    """(commit, kind, files, siblings by name) or UnsupportedModelError with the reason, before any download."""
    with hub_errors(repo_id, revision):
        info = api().model_info(repo_id, revision=revision, files_metadata=True, timeout=timeout())
        names = [s.rfilename for s in info.siblings or []]
        siblings = {s.rfilename: s for s in info.siblings or []}
        kind, files = select_files(names)
        if kind == "adapter":
            reason = "" if "adapter_model.safetensors" in names else \
                "adapter has no adapter_model.safetensors (only .bin): llmchat loads safetensors only"
            reason = reason or adapter_reason(_fetch_json(repo_id, "adapter_config.json", info.sha))
        elif is_gguf_repo(names):
            sizes = {n: (x.lfs.size if x.lfs else x.size) for n, x in siblings.items()}
            raise QuantChoiceError(f"{repo_id} is a GGUF repo: pick a quant with `llmchat models pull {repo_id} "
                                   f"--quant NAME` ({quant_list(gguf_quants(names, sizes))})")
        else:
            reason = weights_reason(names) if "config.json" in names else "no config.json in the repo"
            if not reason:
                config = info.config if (info.config or {}).get("architectures") else None
                config = config or _fetch_json(repo_id, "config.json", info.sha)
                reason = architecture_reason(config)
    if reason:
        raise UnsupportedModelError(f"{repo_id} cannot be used: {reason}")
    return info.sha, kind, files, siblings


def pull(store, repo_id: str, revision: str | None, progress=None,
         cancel: threading.Event | None = None) -> Path:
    cache = store.cache_dir
    try:
        ensure_online()
    except OfflineError:
        snap = cached_snapshot(cache, repo_id, revision)
        if snap is not None:
            return snap  # already complete: offline is no reason to fail
        raise
    commit, kind, files, siblings = plan(repo_id, revision)
    snap = fetch_files(store, repo_id, revision, commit, files, siblings, progress, cancel)
    info = describe_folder(snap)
    if not info.complete:
        raise CorruptDownloadError(f"{repo_id}: {info.reason}")
    return snap


# ---- GGUF repos: one quant file, registered by the store's GGUF import --------------------------------
def quant_list(quants: list[GGUFQuant]) -> str:
    """"Q4_K_M 105.0 MB, Q8_0 145.0 MB; not runnable: IQ4_XS; split (not supported yet): Q6_K" for messages."""
    def label(q: GGUFQuant) -> str:
        return q.name if q.size is None else f"{q.name} {human_bytes(q.size)}"
    runnable = [label(q) for q in quants if q.supported and not q.split]
    parts = [", ".join(runnable) if runnable else "no single-file quant the engine runs"]
    split = [label(q) for q in quants if q.supported and q.split]
    if split:
        parts.append("split into parts (not supported yet): " + ", ".join(split))
    other = [q.name for q in quants if not q.supported]
    if other:
        parts.append("not runnable: " + ", ".join(other))
    return "; ".join(parts)


def pick_quant(repo_id: str, quants: list[GGUFQuant], wanted: str) -> GGUFQuant:
    """The quant named `wanted` (case-insensitive; a file name works too), or QuantChoiceError listing them."""
    text = wanted.strip()
    key = {"FP16": "F16", "FP32": "F32"}.get(text.upper(), text.upper())
    matches = [q for q in quants if q.name.upper() == key
               or any(key in (f.upper(), f.rsplit("/", 1)[-1].upper()) for f in q.files)]
    if not matches:  # "Q4_K_M" when two files of that quant are told apart by their stems
        matches = [q for q in quants if quant_name(q.files[0]) == key]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise QuantChoiceError(f"{repo_id} has several {text} files ({', '.join(q.name for q in matches)}): "
                               "pass the one you want to --quant")
    raise QuantChoiceError(f"{repo_id} has no {text} file; it has: {quant_list(quants)}")


def _base_model_reason(info) -> str:
    """Why the engine cannot run the repo's base model; empty if it can or nobody says (the file decides)."""
    card = getattr(info, "card_data", None)
    for base in base_models(info.tags, {"base_model": getattr(card, "base_model", None)} if card else None)[:1]:
        try:
            with hub_errors(base):
                config = api().model_info(base, timeout=timeout()).config or {}
        except StoreError:
            return ""  # a base we cannot read is no reason to refuse
        if config.get("architectures"):
            return architecture_reason({"architectures": config["architectures"]})
    return ""


def plan_gguf(repo_id: str, revision: str | None, wanted: str) -> tuple[str, GGUFQuant, dict]:
    """(commit, the chosen quant, siblings by name), refusing before any download what cannot run."""
    with hub_errors(repo_id, revision):
        info = api().model_info(repo_id, revision=revision, files_metadata=True, timeout=timeout())
    siblings = {s.rfilename: s for s in info.siblings or []}
    quants = gguf_quants(list(siblings), {n: (s.lfs.size if s.lfs else s.size) for n, s in siblings.items()})
    if not quants:
        raise QuantChoiceError(f"{repo_id} has no GGUF files: pull it without --quant")
    chosen = pick_quant(repo_id, quants, wanted)
    if not chosen.supported:
        raise UnsupportedModelError(f"{repo_id}: {chosen.reason}; pick another quant: {quant_list(quants)}")
    if chosen.split:
        raise UnsupportedModelError(f"{repo_id}: {chosen.name} is split into {len(chosen.files)} files, and split "
                                    f"GGUF files are not supported yet; pick a single-file quant: {quant_list(quants)}")
    arch = gguf_architecture(getattr(info, "gguf", None), info.tags)
    reason = gguf_architecture_reason(arch) if arch else _base_model_reason(info)
    if reason:
        raise UnsupportedModelError(f"{repo_id} cannot be used: {reason}")
    return info.sha, chosen, siblings


def cached_gguf(cache: Path, repo_id: str, revision: str | None, wanted: str) -> Path | None:
    """The quant's file in a cached snapshot (linked only once verified), for pulling again offline."""
    snap = repo_dir(cache, repo_id) / "snapshots"
    ref = repo_dir(cache, repo_id) / "refs" / (revision or "main")
    snap = snap / (ref.read_text().strip() if ref.is_file() else (revision or "main"))
    if not snap.is_dir():
        return None
    names = [p.relative_to(snap).as_posix() for p in snap.rglob("*.gguf")]
    try:
        chosen = pick_quant(repo_id, gguf_quants(names), wanted)
    except QuantChoiceError:
        return None
    path = snap / chosen.files[0]
    return path if not chosen.split and path.exists() else None


def _register(store, path: Path, progress=None):
    """store.import_path on the snapshot's file. The library name comes from the file name, which the import
    would lose on resolving the cache's link to its blob (named by hash); a taken name is left to the import
    (this same file pulled again is found by its origin)."""
    wanted = safe_name(path.stem)
    name = None if wanted in {m.name for m in store.list()} else wanted
    return store.import_path(path, progress=progress, name=name)


def pull_gguf(store, repo_id: str, quant: str, revision: str | None = None, progress=None,
              cancel: threading.Event | None = None):
    """Download one quant file of a GGUF repo (resumable, verified) and register it with store.import_path.
    The GGUF holds its tokenizer and chat template: nothing else is downloaded."""
    if revision is None and "@" in repo_id:
        repo_id, revision = repo_id.split("@", 1)
    try:
        ensure_online()
    except OfflineError:
        path = cached_gguf(store.cache_dir, repo_id, revision, quant)
        if path is None:
            raise
        return _register(store, path, progress)  # already downloaded: offline is no reason to fail
    commit, chosen, siblings = plan_gguf(repo_id, revision, quant)
    snap = fetch_files(store, repo_id, revision, commit, chosen.files, siblings, progress, cancel)
    return _register(store, snap / chosen.files[0], progress)
