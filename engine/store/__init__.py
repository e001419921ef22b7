"""Model store: Hub search and downloads into the HF cache, the local library, folder and GGUF imports."""
from .registry import default_data_dir
from .resolve import resolve_model
from .store import ModelStore
from .support import SUPPORTED_ARCHITECTURES
from .types import (CorruptDownloadError, DownloadCancelled, DownloadProgress, GatedRepoError, HubModel,
                    LocalModel, NotEnoughDiskError, OfflineError, RepoNotFoundError, StoreError,
                    UnsupportedModelError)

__all__ = ["ModelStore", "resolve_model", "default_data_dir", "HubModel", "LocalModel", "DownloadProgress",
           "SUPPORTED_ARCHITECTURES",
           "StoreError", "OfflineError", "GatedRepoError", "RepoNotFoundError", "UnsupportedModelError",
           "NotEnoughDiskError", "CorruptDownloadError", "DownloadCancelled"]
