"""Talking to the Hub through huggingface_hub: endpoint/token/offline from the environment, a fast
reachability probe (no call hangs on a network that is not there), errors turned into clear messages,
and search filtered to what the engine runs.
The Hub client (~0.3 s with its HTTP stack) is imported in the functions that call it: starts never wait for it.
"""
from __future__ import annotations

import contextlib
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

from huggingface_hub import constants

from .support import (GGUF_ARCHITECTURES, SUPPORTED_ARCHITECTURES, SUPPORTED_TEXT, architecture_reason,
                      gguf_architecture, gguf_quants, gguf_repo_reason, is_gguf_model_file, select_files,
                      weights_reason)
from .types import GatedRepoError, HubModel, OfflineError, RepoNotFoundError, StoreError

SORTS = {"downloads": "downloads", "likes": "likes", "recent": "last_modified"}
_DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I8": 1, "U8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
                "I32": 4, "I64": 8, "I16": 2}


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def token() -> str | None:
    """HF_TOKEN, else huggingface_hub's own login. Read per call, never copied into llmchat's config."""
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    from huggingface_hub import get_token   # huggingface_hub's login helpers (~0.15 s): only without HF_TOKEN
    return get_token()


def timeout() -> float:
    return float(os.environ.get("LLMCHAT_HUB_TIMEOUT", "10"))


def offline_by_setting() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def ensure_online() -> None:
    """Raise OfflineError fast when offline is set or the endpoint has no route (short TCP probe)."""
    ep = endpoint()
    if offline_by_setting():
        raise OfflineError("offline mode (HF_HUB_OFFLINE is set): the Hub is not contacted; "
                           "downloaded and imported models still work (`llmchat models list`)")
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return  # behind a proxy the Hub host itself is not reachable directly; let the client decide
    url = urlparse(ep)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=min(timeout(), 3.0)).close()
    except OSError as exc:
        raise OfflineError(f"cannot reach the Hub at {ep} ({exc.strerror or exc}); "
                           "downloaded and imported models still work (`llmchat models list`)") from None


@contextlib.contextmanager
def hub_errors(repo_id: str | None = None, revision: str | None = None):
    """Turn huggingface_hub / httpx errors into StoreError subclasses with a clear message."""
    # httpx and huggingface_hub's errors (~0.1 s): when the Hub is used, not whenever the store is imported
    import httpx2
    from huggingface_hub import errors as hf
    what = repo_id or "the Hub"
    try:
        yield
    except hf.OfflineModeIsEnabled as exc:
        raise OfflineError(f"offline mode: {exc}") from None
    except hf.GatedRepoError:
        if token():
            raise GatedRepoError(
                f"{what} is gated and your token has no access: accept its license at {endpoint()}/{repo_id} "
                "with the account of that token (HF_TOKEN or `hf auth login`)") from None
        raise GatedRepoError(
            f"{what} is gated: accept its license at {endpoint()}/{repo_id}, then log in "
            "(`hf auth login`) or set HF_TOKEN to a token of that account") from None
    except hf.RevisionNotFoundError:
        raise RepoNotFoundError(f"revision {revision!r} of {what} not found on {endpoint()}") from None
    except hf.RepositoryNotFoundError:
        raise RepoNotFoundError(f"model repo {what} not found on {endpoint()} (check the name; "
                                "private repos need HF_TOKEN)") from None
    except hf.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            raise GatedRepoError(f"access to {what} denied ({status}): if it is gated, accept its license at "
                                 f"{endpoint()}/{repo_id} and log in (`hf auth login`) or set HF_TOKEN") from None
        raise StoreError(f"the Hub answered {status} for {what}: {str(exc).splitlines()[0]}") from None
    except (httpx2.TransportError, httpx2.TimeoutException) as exc:
        raise OfflineError(f"lost the connection to {endpoint()} ({type(exc).__name__}); "
                           "run the command again to resume") from None


def api():
    from huggingface_hub import HfApi   # huggingface_hub's client (~0.3 s): when the Hub is used
    return HfApi(endpoint=endpoint(), token=token(), library_name="llmchat")


def _weights_bytes(safetensors) -> int | None:
    if not safetensors or not safetensors.parameters:
        return None
    return sum(n * _DTYPE_BYTES.get(dt, 2) for dt, n in safetensors.parameters.items())


def is_gguf_repo(names: list[str]) -> bool:
    """GGUF files and no safetensors model beside them (a repo with both is pulled as safetensors)."""
    return any(is_gguf_model_file(n) for n in names) and bool(weights_reason(names))


def gguf_hub_model(info) -> HubModel:
    """A GGUF repo as a search hit: quants from the file names (sizes come later: add_quant_sizes),
    architecture from the Hub's GGUF metadata, else a family tag."""
    quants = gguf_quants([s.rfilename for s in info.siblings or []])
    arch = gguf_architecture(getattr(info, "gguf", None), info.tags)
    reason = gguf_repo_reason(arch, quants)
    lm = info.last_modified.isoformat() if info.last_modified else None
    params = (getattr(info, "gguf", None) or {}).get("total")
    return HubModel(info.id, GGUF_ARCHITECTURES.get(arch, arch), params, None, info.downloads, info.likes, lm,
                    bool(info.gated), not reason, reason, "model", quants)


def to_hub_model(info) -> HubModel:
    names = [s.rfilename for s in (info.siblings or [])]
    if is_gguf_repo(names):
        return gguf_hub_model(info)
    kind = select_files(names)[0] if names else "model"
    arch = None
    if kind == "adapter":
        reason, arch = "", "LoRA adapter"
        if names and "adapter_model.safetensors" not in names:
            reason = "adapter without adapter_model.safetensors (only .bin): not supported"
    else:
        config = info.config or {}
        arch = (config.get("architectures") or [None])[0]
        reason = architecture_reason(config) if config else "the Hub has no config for it"
        if not reason and names:
            reason = weights_reason(names)
    lm = info.last_modified.isoformat() if info.last_modified else None
    return HubModel(info.id, arch, info.safetensors.total if info.safetensors else None,
                    _weights_bytes(info.safetensors), info.downloads, info.likes, lm, bool(info.gated),
                    not reason, reason, kind)


def _sizes(repo_id: str) -> dict[str, int | None] | None:
    """File sizes of one repo (the listing has names only), or None if the Hub does not answer."""
    try:
        with hub_errors(repo_id):
            info = api().model_info(repo_id, files_metadata=True, timeout=timeout())
    except StoreError:
        return None  # sizes are a nicety: the hit stays, shown without them
    return {s.rfilename: (s.lfs.size if s.lfs else s.size) for s in info.siblings or []}


def add_quant_sizes(models: list[HubModel]) -> None:
    """Fill in the quant sizes of the GGUF hits in `models`: one model-info call per repo, a few at a time."""

    todo = [m for m in models if m.quants and any(q.size is None for q in m.quants)]
    if not todo:
        return
    with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
        for model, sizes in zip(todo, pool.map(lambda m: _sizes(m.repo_id), todo)):
            if sizes is not None:
                model.quants = gguf_quants(list(sizes), sizes)


def search(query: str, sort: str = "downloads", limit: int = 20,
           include_unsupported: bool = False, size_lookups: int = 20) -> list[HubModel]:
    """Text-generation models matching `query`; only the ones the engine runs unless include_unsupported.
    The first `size_lookups` runnable GGUF hits get their quant sizes (the listing has none: a call each)."""
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
    if limit <= 0:
        raise ValueError("limit must be positive")
    ensure_online()
    expand = ["config", "safetensors", "downloads", "likes", "lastModified", "gated", "siblings", "pipeline_tag",
              "gguf", "tags"]
    with hub_errors():
        found = [to_hub_model(i) for i in api().list_models(
            search=query or None, pipeline_tag="text-generation", sort=SORTS[sort],
            limit=max(limit * 5, 50), expand=expand)]
    key = {"downloads": lambda m: m.downloads or 0, "likes": lambda m: m.likes or 0,
           "recent": lambda m: m.last_modified or ""}[sort]
    found.sort(key=key, reverse=True)
    if not include_unsupported:
        found = [m for m in found if m.supported]
    found = found[:limit]
    add_quant_sizes([m for m in found if m.supported and m.quants][:size_lookups])
    return found


def unsupported_note() -> str:
    return f"{SUPPORTED_TEXT} ({', '.join(SUPPORTED_ARCHITECTURES)}; unquantized safetensors or GGUF files)"
