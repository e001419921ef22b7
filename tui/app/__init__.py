"""The Textual app (`llmchat` without a subcommand): app.py (LlmChatApp and its app.tcss), screens/, widgets/, the chat
controller and what it drives (sessions in SQLite, reply streams, loaded engines). main.py is its entry point."""
from .app import LlmChatApp

__all__ = ["LlmChatApp"]
