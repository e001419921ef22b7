"""`python -m llmchat.engine.serve MODEL_FOLDER --port N [--engine JSON]`: the API on one model folder, for
benchmarks and scripts that start a server without the command line (`llmchat serve` is the user's entrance)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .run import serve
from .state import ModelSpec, ServerSettings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m llmchat.engine.serve")
    parser.add_argument("model", help="model folder (its name is the model id)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--engine", default="{}", help="the engine's keyword arguments (EngineConfig) as JSON")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    folder = Path(args.model)
    try:
        serve([ModelSpec(folder.name, folder)], ServerSettings(engine_kwargs=json.loads(args.engine)),
              args.host, args.port, args.log_level)
    except KeyboardInterrupt:   # how a server is stopped
        pass


if __name__ == "__main__":
    main()
