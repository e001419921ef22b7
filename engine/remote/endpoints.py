"""Remote OpenAI-compatible endpoints (vLLM, llama-server, Ollama's /v1, LM Studio, another `llmchat serve`):
where they are, how to reach them, and how a remote model is named ("remote:NAME/MODEL-ID")."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

REMOTE_PREFIX = "remote:"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Endpoint:
    name: str
    base_url: str                 # up to and including /v1, as the openai client takes it
    api_key_env: str = ""         # the NAME of an environment variable holding the key, never the key

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None if self.api_key_env else None

    def model_name(self, model_id: str) -> str:
        return f"{REMOTE_PREFIX}{self.name}/{model_id}"


def normalize_base_url(url: str) -> str:
    """http(s)://host[:port][/path]; a bare host gets /v1 (where every OpenAI-compatible server lives)."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"endpoint URL must look like http://host:port/v1, got {url!r}")
    return url if parts.path else url + "/v1"


def make_endpoint(name: str, base_url: str, api_key_env: str = "") -> Endpoint:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"endpoint name must be letters, digits, '.', '_' or '-', got {name!r}")
    if not isinstance(base_url, str):
        raise ValueError(f"endpoint {name}: base_url must be a string")
    if not isinstance(api_key_env, str) or (api_key_env and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", api_key_env)):
        raise ValueError(f"endpoint {name}: api_key_env must be the name of an environment variable "
                         f"(the key itself does not belong in settings.toml), got {api_key_env!r}")
    return Endpoint(name, normalize_base_url(base_url), api_key_env)


def parse_endpoint_arg(text: str) -> Endpoint:
    """--endpoint NAME=URL[,KEY_ENV] from the command line."""
    name, sep, rest = text.partition("=")
    if not sep or not rest:
        raise ValueError(f"--endpoint takes NAME=URL (optionally NAME=URL,KEY_ENV_VAR), got {text!r}")
    url, _, key_env = rest.partition(",")
    return make_endpoint(name.strip(), url, key_env.strip())


def endpoints_from_settings(entries) -> list[Endpoint]:
    """settings.toml [[endpoints]]: name, base_url, optional api_key_env."""
    if not isinstance(entries, list):
        raise ValueError("endpoints must be a list of tables ([[endpoints]])")
    endpoints = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"endpoints[{i}] must be a table with name and base_url")
        unknown = sorted(set(entry) - {"name", "base_url", "api_key_env"})
        if unknown:
            raise ValueError(f"endpoints[{i}] has unknown key(s): {', '.join(unknown)}")
        if "name" not in entry or "base_url" not in entry:
            raise ValueError(f"endpoints[{i}] needs name and base_url")
        endpoints.append(make_endpoint(entry["name"], entry["base_url"], entry.get("api_key_env", "")))
    return merge_endpoints(endpoints, [])


def merge_endpoints(base: list[Endpoint], overrides: list[Endpoint]) -> list[Endpoint]:
    """Command-line endpoints replace settings ones of the same name; two of one name in one list: an error."""
    merged: dict[str, Endpoint] = {}
    for group in (base, overrides):
        seen = set()
        for endpoint in group:
            if endpoint.name in seen:
                raise ValueError(f"endpoint {endpoint.name!r} is defined twice")
            seen.add(endpoint.name)
            merged[endpoint.name] = endpoint
    return list(merged.values())


def is_remote(model: str) -> bool:
    return isinstance(model, str) and model.startswith(REMOTE_PREFIX)


def split_remote(model: str) -> tuple[str, str]:
    """"remote:NAME/MODEL-ID" -> (NAME, MODEL-ID); model ids may contain slashes (org/repo)."""
    name, sep, model_id = model[len(REMOTE_PREFIX):].partition("/")
    if not is_remote(model) or not sep or not name or not model_id:
        raise ValueError(f"a remote model is written remote:ENDPOINT/MODEL-ID, got {model!r}")
    return name, model_id


def find_endpoint(endpoints: list[Endpoint], name: str) -> Endpoint:
    for endpoint in endpoints:
        if endpoint.name == name:
            return endpoint
    known = ", ".join(e.name for e in endpoints) or "none defined"
    raise ValueError(f"no endpoint named {name!r} (known: {known}); add it to settings.toml as [[endpoints]] "
                     f"or pass --endpoint {name}=URL")
