"""Prints, one per line, what the venv of the ARM job needs besides llmchat's dependencies: the build
requirements of pyproject.toml (the venv is the build environment) and the test extras the ARM tests use,
with the versions pyproject.toml asks for."""
import re
import sys
import tomllib

ARM_TESTS_USE = {"pytest", "pytest-asyncio", "pytest-xdist", "peft"}   # .ci/arm/inside's tests: no fuzzing, no snapshots

project = tomllib.load(open(sys.argv[1], "rb"))
wanted = [*project["build-system"]["requires"],
          *(r for r in project["project"]["optional-dependencies"]["test"]
            if re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() in ARM_TESTS_USE)]
print("\n".join(wanted))
