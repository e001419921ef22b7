"""The fenced code blocks of a message: what "copy code" copies."""
from __future__ import annotations

import re

CODE_BLOCK = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)


def code_blocks(text: str) -> list[str]:
    """Fenced code blocks of a message, an unterminated last block included (a cut-off reply)."""
    return [block.rstrip("\n") for block in CODE_BLOCK.findall(text)]
