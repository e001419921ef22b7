"""Asked when a session's model has no chat template (a base model): use the family's known template its
vocabulary suggests, or raw mode (the text typed is continued as plain completion). Saved as the session's
"Chat template" setting (F3), where it can be changed later."""
from __future__ import annotations

from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from ..chat_prompt import RAW


def no_template_text(suggested: str | None) -> str:
    offer = (f"Use the {suggested!r} chat template its vocabulary suggests, or raw mode"
             if suggested else "No known chat template fits its vocabulary: raw mode")
    return (f"This model has no chat template (a base model?). {offer} (your text is continued as plain "
            f"completion). F3 (Chat template) changes it later.")


class ChatTemplateChoice(ModalScreen[str | None]):
    """Dismissed with the chosen chat_template setting (a known name or "raw"), or None."""
    BINDINGS = [Binding("escape", "choose(None)", "Cancel", id="template.cancel"),
                Binding("t", "choose_suggested", "Known template", id="template.known"),
                Binding("r", "choose('raw')", "Raw mode", id="template.raw")]

    def __init__(self, suggested: str | None) -> None:
        super().__init__(classes="dialog-screen")
        self.suggested = suggested

    def compose(self):
        with Vertical(classes="dialog", id="template-choice"):
            yield Label(no_template_text(self.suggested), classes="dialog-title")
            with Horizontal(classes="dialog-buttons"):
                if self.suggested:
                    yield Button(f"Use {self.suggested} (t)", variant="primary", id="known", compact=True)
                yield Button("Raw mode (r)", id="raw", compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss({"known": self.suggested, "raw": RAW}.get(event.button.id))

    def action_choose_suggested(self) -> None:
        if self.suggested:
            self.dismiss(self.suggested)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)
