"""`python -m llmchat.tui.cli ...`: the same as the `llmchat` command."""
import sys

from . import main

sys.exit(main())
