"""`python -m llmchat.tui.cli ...`: the same as the `llmchat` command."""
from . import entry

entry()
