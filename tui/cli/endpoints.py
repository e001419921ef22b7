"""--endpoint NAME=URL[,KEY_ENV] for the commands that can use remote models, merged with settings.toml's."""
from __future__ import annotations

HELP = ("a remote OpenAI-compatible server (vLLM, llama-server, Ollama's /v1, llmchat serve); its models are "
        "remote:NAME/MODEL-ID. KEY_ENV names the environment variable holding its API key. Repeatable; "
        "settings.toml [[endpoints]] are always known")


def add_endpoint_option(parser, dest: str = "endpoints") -> None:
    parser.add_argument("--endpoint", dest=dest, action="append", default=[], metavar="NAME=URL[,KEY_ENV]", help=HELP)


def endpoints_from(args_endpoints: list[str]) -> list:
    """settings.toml's endpoints, then the command line's (which replace those of the same name)."""
    # here, not at the top: every command builds the --endpoint option, few read endpoints (httpx: ~0.1 s)
    from llmchat.engine.remote import merge_endpoints, parse_endpoint_arg
    from ..paths import config_dir
    from ..settings import SettingsStore
    store = SettingsStore(config_dir() / "settings.toml")
    settings = store.load()
    if store.problem:
        raise ValueError(store.problem)
    return merge_endpoints(settings.remote_endpoints(), [parse_endpoint_arg(e) for e in args_endpoints])
