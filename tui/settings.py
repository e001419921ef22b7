"""App settings in TOML: read with tomllib, written with tomli-w.

A malformed or invalid file never crashes the app and is never overwritten silently: loading returns
defaults plus a message for the user, and the store refuses to save until the file is fixed.
"""
from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import tomli_w

from llmchat.engine.remote import endpoints_from_settings


@dataclass
class Settings:
    default_model: str = ""              # name in the library or a folder path; "" = none yet
    memory_budget_gb: float = 8.0        # weights + KV of all loaded models; LRU model unloaded beyond it
    kv_cache_gb: float = 0.5             # KV cache per loaded model
    system_prompt: str = ""              # default for new sessions
    theme: str = "textual-dark"
    quantize: str = ""                   # "q8_0" | "q4_0" | "q4_k": quantize 16/32-bit models at load ("" = no)
    engine_kwargs: dict = field(default_factory=dict)   # extra AsyncEngine keyword arguments
    endpoints: list = field(default_factory=list)       # [[endpoints]] name, base_url, api_key_env: remote servers

    @classmethod
    def from_dict(cls, data: dict) -> "Settings":
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"unknown setting(s): {', '.join(unknown)}")
        settings = cls(**data)
        for name, expected in (("memory_budget_gb", (int, float)), ("kv_cache_gb", (int, float)),
                               ("default_model", str), ("system_prompt", str),
                               ("theme", str), ("quantize", str), ("engine_kwargs", dict), ("endpoints", list)):
            value = getattr(settings, name)
            if not isinstance(value, expected) or isinstance(value, bool):
                raise ValueError(f"{name} has the wrong type ({type(value).__name__})")
        if settings.memory_budget_gb <= 0 or settings.kv_cache_gb <= 0:
            raise ValueError("memory_budget_gb and kv_cache_gb must be positive")
        if settings.quantize not in ("", "q8_0", "q4_0", "q4_k"):
            raise ValueError(f"quantize must be q8_0, q4_0 or q4_k (or empty), got {settings.quantize!r}")
        settings.remote_endpoints()   # ValueError naming the bad entry
        return settings


    def remote_endpoints(self) -> list:
        return endpoints_from_settings(self.endpoints)


class SettingsStore:
    """Loads and saves settings.toml; `problem` holds the message when the file could not be used."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem: str | None = None

    def load(self) -> Settings:
        self.problem = None
        if not self.path.exists():
            return Settings()
        try:
            with self.path.open("rb") as handle:
                return Settings.from_dict(tomllib.load(handle))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            reason = f"it is not valid TOML: {exc}"
        except (ValueError, TypeError) as exc:
            reason = str(exc)
        self.problem = (f"{self.path} could not be used ({reason}); using defaults. "
                        "Fix or delete the file: llmchat will not overwrite it.")
        return Settings()

    def save(self, settings: Settings) -> None:
        """Write the settings; refused (ValueError) while the file on disk is malformed."""
        if self.problem is not None:
            raise ValueError(f"settings not saved: {self.path} is malformed; fix or delete it first")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".toml.tmp")
        tmp.write_text(tomli_w.dumps(asdict(settings)), encoding="utf-8")
        tmp.replace(self.path)
