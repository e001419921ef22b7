"""Help: every key binding with what it does, the screens, and where data lives."""
from __future__ import annotations

from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from ..paths import config_dir, data_dir


def help_markdown(app) -> str:
    lines = ["# llmchat help", "", "| key | action |", "|---|---|"]
    for binding in app.BINDINGS:
        if isinstance(binding, Binding) and binding.description:
            lines.append(f"| `{binding.key}` | {binding.description} |")
    lines += [
        "| `enter` | send (in the input) |", "| `ctrl+j` | new line in the input |",
        "| `up` / `down` | input history |",
        "| `c` / `y` / `e` | on a focused message: copy it / copy its code block / edit and resend |",
        "| `ctrl+p` | command palette: every action by name |", "",
        "## Screens",
        "- **Chat**: sessions on the left, the conversation, the engine panel on the right.",
        "- **Session settings** (`f3`): model, adapter, system prompt, temperature, top-p, top-k, min-p, "
        "max tokens, seed. Empty fields use the model's generation_config.",
        "- **Models** (`f4`): search and download from the Hub, the local library, import a folder or a "
        ".gguf file (works offline), adapters.",
        "- **Compare** (`f6`): one prompt to 2-4 models or adapters with the same seed, side by side.",
        "", "## Where data lives",
        f"- chats (SQLite) and exports: `{data_dir()}`",
        f"- settings: `{config_dir() / 'settings.toml'}`",
        "- override with `LLMCHAT_DATA_DIR` / `LLMCHAT_CONFIG_DIR`.",
    ]
    return "\n".join(lines)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f1", "dismiss", "Close", id="help.close")]

    def compose(self):
        with VerticalScroll(classes="dialog wide"):
            yield Markdown(help_markdown(self.app))
