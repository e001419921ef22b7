"""Model store: Hub search and downloads into the HF cache, the local library, folder and GGUF imports."""
from .store import ModelStore
from .support import SUPPORTED_ARCHITECTURES
from .types import (CorruptDownloadError, DownloadCancelled, DownloadProgress, GatedRepoError, HubModel,
                    LocalModel, NotEnoughDiskError, OfflineError, RepoNotFoundError, StoreError,
                    UnsupportedModelError)

__all__ = ["ModelStore", "HubModel", "LocalModel", "DownloadProgress", "SUPPORTED_ARCHITECTURES",
           "StoreError", "OfflineError", "GatedRepoError", "RepoNotFoundError", "UnsupportedModelError",
           "NotEnoughDiskError", "CorruptDownloadError", "DownloadCancelled"]
