"""Which quant file of a GGUF repo to download: one line per quant with its size, the ones the engine
cannot use shown but disabled (with why). Dismisses with the quant name, or None on escape."""
from __future__ import annotations

from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from llmchat.engine.store.pull import human_bytes

USUAL_PICKS = ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q8_0")  # highlighted first: the common default, then quality


def quant_line(quant) -> str:
    size = "size ?" if quant.size is None else human_bytes(quant.size)
    note = quant.reason.split(" (")[0] if not quant.supported else \
        f"split into {len(quant.files)} files: not supported yet" if quant.split else ""
    return f"{quant.name:<12} {size:>9}  {note}".rstrip()


def usable(quant) -> bool:
    return quant.supported and not quant.split


class QuantPicker(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="quant.cancel")]

    def __init__(self, repo_id: str, quants: list) -> None:
        super().__init__(classes="dialog-screen")
        self.repo_id, self.quants = repo_id, quants

    def compose(self):
        with Vertical(classes="dialog wide"):
            yield Label(f"Download which quant of {self.repo_id}?", classes="dialog-title")
            yield OptionList(*[Option(quant_line(q), id=q.name, disabled=not usable(q)) for q in self.quants],
                             id="quant-list")
            yield Label("Enter downloads · Esc cancels · Q4_K_M is the usual pick, Q8_0 the closest to the "
                        "original", classes="hint")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        names = [q.name for q in self.quants if usable(q)]
        first = next((n for n in USUAL_PICKS if n in names), names[0] if names else None)
        if first is not None:
            options.highlighted = [q.name for q in self.quants].index(first)
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
