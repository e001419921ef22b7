"""Every app action, once: the command palette lists those of the screen it opens over (the chat's on the
chat screen) and the app's, and runs each where it lives."""
from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

# (palette title, help text, action of the chat screen or of the app)
ACTIONS: list[tuple[str, str, str]] = [
    ("New session", "Start a new chat session", "new_session"),
    ("Rename session", "Rename the current session", "rename_session"),
    ("Delete session", "Delete the current session and its messages", "delete_session"),
    ("Next session", "Switch to the next session", "next_session"),
    ("Previous session", "Switch to the previous session", "previous_session"),
    ("Stop generating", "Stop the reply of the current session (aborts it in the engine)", "stop"),
    ("Regenerate reply", "Generate the last reply again", "regenerate"),
    ("Continue reply", "Continue a reply that was cut off or stopped", "continue_reply"),
    ("Edit last message", "Put your last message back in the input; Enter resends it", "edit_last"),
    ("Copy last reply", "Copy the last reply to the clipboard", "copy_last_reply"),
    ("Copy last code block", "Copy the last code block of the last reply", "copy_last_code"),
    ("Session settings", "Model, adapter, system prompt and sampling of this session", "session_settings"),
    ("Models", "Search, download, import and delete models and adapters", "models"),
    ("Compare models", "Send one prompt to 2-4 models or adapters side by side", "compare"),
    ("Open compare report", "Browse a report written by `llmchat compare`", "open_compare_report"),
    ("Export session", "Write the session to Markdown and JSON in the exports folder", "export_session"),
    ("Focus input", "Move the cursor to the message input", "focus_input"),
    ("Help", "Keys, screens and where llmchat keeps its data", "help"),
    ("Quit", "Quit llmchat", "quit"),
]


class ActionsProvider(Provider):
    """One provider for all llmchat actions."""

    def available(self):
        """(title, help, run) of each action the calling screen or the app has."""
        for title, help_text, action in ACTIONS:
            for node in (self.screen, self.app):
                if hasattr(node, f"action_{action}"):
                    yield title, help_text, partial(node.run_action, action)
                    break

    async def discover(self) -> Hits:
        for title, help_text, run in self.available():
            yield DiscoveryHit(title, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, run in self.available():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), run, help=help_text)
