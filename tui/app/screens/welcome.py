"""First run without any model: point to the Models screen (download) or to importing a local file."""
from __future__ import annotations

from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Markdown

WELCOME = """# Welcome to llmchat

There is no model yet. llmchat runs models on this computer, so it needs one first.

- **Online**: open **Models** (`m`), search the Hugging Face Hub (for example `SmolLM2 Instruct`) and download.
- **Offline**: import a model you already have, a Hugging Face folder or a `.gguf` file (`i`).
- Or start with `llmchat --model PATH`.
"""


class WelcomeScreen(ModalScreen[str | None]):
    """Dismisses with "models", "import" or None."""
    BINDINGS = [Binding("m", "choose('models')", "Models", id="welcome.models"),
                Binding("i", "choose('import')", "Import", id="welcome.import"),
                Binding("escape", "choose(None)", "Later", id="welcome.later")]

    def __init__(self) -> None:
        super().__init__(classes="dialog-screen")

    def compose(self):
        with Vertical(classes="dialog wide", id="welcome"):
            yield Markdown(WELCOME)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Models (m)", variant="primary", id="models")
                yield Button("Import local (i)", id="import")
                yield Button("Later (esc)", id="later")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "later" else event.button.id)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)
