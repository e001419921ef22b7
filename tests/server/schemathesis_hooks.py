"""Schemathesis' positive_data_acceptance with the one thing no JSON schema can say: a schema-valid body may
still be refused (400) for a grammar, regex or JSON schema the grammar library refuses (issue 36 asks for that
400, naming the parameter), a tool_choice naming a function the tools lack, or a prompt beyond the context.
Any other 400 on a schema-valid body is a failure. For the CLI:

    SCHEMATHESIS_HOOKS=schemathesis_hooks PYTHONPATH=tests/server schemathesis run URL/openapi.json \\
        --checks all --exclude-checks positive_data_acceptance --max-examples 40
"""
from __future__ import annotations

import schemathesis

JUDGED_BY_THE_LIBRARY = ("grammar", "json_schema", "structured_outputs", "response_format", "tool_choice", "tools")


def refused_for_what_no_schema_says(error: dict) -> bool:
    return error["code"] == "context_length_exceeded" or (
        (error["param"] or "").split(".")[0] in JUDGED_BY_THE_LIBRARY)


@schemathesis.check
def schema_valid_bodies_are_served(ctx, response, case):
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code != 400:
        return None
    error = response.json()["error"]
    if not refused_for_what_no_schema_says(error):
        raise AssertionError(f"a schema-valid body was refused: {error}")
    return None
