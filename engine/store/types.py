"""Plain data the store hands out: Hub search hits, local library entries, download progress, errors."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path


class StoreError(RuntimeError):
    """An expected failure with a message fit for the user (the CLI prints it as is)."""


class OfflineError(StoreError):
    """The Hub cannot be reached (HF_HUB_OFFLINE=1 or no route); local models still work."""


class GatedRepoError(StoreError):
    """The repo needs an accepted license and a token."""


class RepoNotFoundError(StoreError, ValueError):
    """No such repo (or revision) on the Hub, or it is private and no valid token was given."""


class UnsupportedModelError(StoreError, ValueError):
    """The engine cannot run this model; refused before any byte is downloaded."""


class NotEnoughDiskError(StoreError):
    """Free space below what the download needs."""


class CorruptDownloadError(StoreError):
    """A downloaded file does not match the size or hash the Hub announced."""


class DownloadCancelled(StoreError):
    """The caller set the cancel event; partial files are kept so the next pull resumes."""


@dataclass
class HubModel:
    """One search result from the Hub."""
    repo_id: str
    architecture: str | None
    num_params: int | None          # from the Hub's safetensors metadata, when known
    download_size: int | None       # bytes of weights to download, when known
    downloads: int | None
    likes: int | None
    last_modified: str | None       # ISO 8601
    gated: bool
    supported: bool
    reason: str = ""                # why the engine cannot run it (empty when supported)
    kind: str = "model"             # "model" | "adapter"
    quants: list = field(default_factory=list)  # GGUF repos: a support.GGUFQuant per quant file, smallest first

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LocalModel:
    """One entry of the local library (HF cache snapshot or imported folder)."""
    name: str                       # what `resolve` and `remove` accept
    path: Path                      # the folder the engine loads
    repo_id: str | None
    revision: str | None            # commit hash for Hub models
    kind: str                       # "model" | "adapter"
    architecture: str | None
    num_params: int | None
    dtype: str | None
    context_length: int | None
    size_bytes: int
    supported: bool
    reason: str = ""
    source: str = "hub"             # "hub" | "folder" | "gguf" | "copy"
    base_model: str | None = None   # adapters: the model they were trained on
    quant: str | None = None        # GGUF files run as they are: their weight types, e.g. "Q4_K_M" or "Q4_1"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


@dataclass
class DownloadProgress:
    """Snapshot handed to the progress callback, for downloads and GGUF imports alike."""
    repo_id: str
    filename: str                   # file being transferred (or the import stage)
    file_index: int                 # 1-based
    num_files: int
    done_bytes: int                 # over the whole pull
    total_bytes: int
    bytes_per_s: float
    eta_s: float | None             # None until a rate is known
    finished: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        return self.done_bytes / self.total_bytes if self.total_bytes else 0.0
