"""Help: every key binding with what it does, the screens, and where data lives."""
from __future__ import annotations

from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from ...paths import config_dir, data_dir


def key_rows(bindings) -> list[str]:
    return [f"| `{b.key}` | {b.description} |" for b in bindings if isinstance(b, Binding) and b.description]


def help_markdown(app, screen=None) -> str:
    """The keys of `screen` when it is not the chat (Compare, Models...), then the app's screens and data."""
    lines = ["# llmchat help", ""]
    if screen is not None and screen is not app.screen_stack[0]:
        lines += [f"## Keys here ({type(screen).__name__.removesuffix('Screen')})", "", "| key | action |",
                  "|---|---|", *key_rows(screen.BINDINGS), "| `f1` | this help |", ""]
        return "\n".join(lines + screens_and_data())
    chat = app.screen_stack[0]
    lines += ["| key | action |", "|---|---|", *key_rows([*chat.BINDINGS, *app.BINDINGS])]
    lines += [
        "| `enter` | send (in the input) |", "| `ctrl+j` | new line in the input |",
        "| `up` / `down` | input history |",
        "| `c` / `y` / `e` | on a focused message: copy it / copy its code block / edit and resend |",
        "| `ctrl+p` | command palette: every action by name |", ""]
    return "\n".join(lines + screens_and_data())


def screens_and_data() -> list[str]:
    return [
        "## Screens",
        "- **Chat**: sessions on the left, the conversation, the engine panel on the right.",
        "- **Session settings** (`f3`): model, adapter, system prompt, temperature, top-p, top-k, min-p, "
        "max tokens, seed. An empty field shows the value used and where it comes from.",
        "- **Models** (`f4`): search and download from the Hub, the local library, import a folder or a "
        ".gguf file (works offline), adapters.",
        "- **Compare** (`f6`): one prompt to 2-4 models or adapters with the same seed, side by side.",
        "", "## Where data lives",
        f"- chats (SQLite) and exports: `{data_dir()}`",
        f"- settings: `{config_dir() / 'settings.toml'}`",
        "- override with `LLMCHAT_DATA_DIR` / `LLMCHAT_CONFIG_DIR`.",
    ]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f1", "dismiss", "Close", id="help.close")]

    def __init__(self, for_screen=None) -> None:
        super().__init__(classes="dialog-screen")
        self.for_screen = for_screen

    def compose(self):
        with VerticalScroll(classes="dialog wide"):
            yield Markdown(help_markdown(self.app, self.for_screen))
