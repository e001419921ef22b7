"""Per-session settings: model, adapter, system prompt, template switches, guessing (and its draft model) and
sampling. Empty fields = the defaults shown in them."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Label, Select, TextArea

from llmchat.engine.chat_templates import KNOWN_TEMPLATES
from llmchat.engine.remote import is_remote
from llmchat.engine.sampling_params import SamplingParams

from ..chat_prompt import MODELS_OWN, RAW
from ..chat_state import SessionSettings
from ..engines import resolve_draft
from ..widgets.mount_safe_select import MountSafeSelect

# What a session's chat messages are rendered with: a base model without a template needs one of the others.
MODELS_OWN_OPTION = "model"   # Select takes no "" value: the option stands for MODELS_OWN
TEMPLATE_CHOICES = [("the model's own", MODELS_OWN_OPTION), *((name, name) for name in KNOWN_TEMPLATES),
                    ("raw (plain completion)", RAW)]
# The template's enable_thinking switch: reasoning first (shown collapsed in the chat), or a direct answer.
THINKING_CHOICES = [("the template's default", "default"), ("on", "on"), ("off", "off")]
# Guessing (speculative decoding, local models): the same tokens either way, only the speed differs.
GUESSING_CHOICES = [("the default (auto; LLMCHAT_SPECULATIVE)", "default"),
                    ("auto: while at most 4 replies stream", "auto"), ("always (n-gram)", "ngram"), ("off", "off")]

# field, label, type
NUMBER_FIELDS = [("temperature", "Temperature", float), ("top_p", "Top-p", float), ("top_k", "Top-k", int),
                 ("min_p", "Min-p", float), ("max_tokens", "Max tokens", int), ("seed", "Seed", int)]


def parse_number(label: str, text: str, kind: type):
    text = text.strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{label} must be {'an integer' if kind is int else 'a number'}, got {text!r}") from None


def default_hint(name: str, defaults: dict) -> str:
    """What an empty field means: the value a request gets and where it comes from."""
    if name == "seed":
        return "random"
    if name not in defaults:
        return "the server's default"      # a remote model: its server decides
    value, source = defaults[name]
    if name == "max_tokens" and value is None:
        return "no limit: until the model stops or the context is full"
    return f"{value} ({source})"


def check_adapter(adapter: str | None, model: str, library: list[str]) -> None:
    """An adapter is a library name or a folder holding adapter_config.json; remote models have none."""
    if not adapter:
        return
    if is_remote(model):
        raise ValueError("a remote model takes no adapter here: its server lists adapters as models of their own")
    if adapter in library or (Path(adapter).expanduser() / "adapter_config.json").is_file():
        return
    known = f" (in the library: {', '.join(library)})" if library else ""
    raise ValueError(f"no adapter {adapter!r}: give a library name{known} or a folder with adapter_config.json")


def check_draft(draft: str | None, model: str, speculative: str | None, data_path: Path | None) -> None:
    """A draft model is found as `llmchat run --draft` finds it; it guesses for a local model, so neither with
    guessing off nor for a remote one. Whether it fits the model (tokenizer, size) the engine says as it loads."""
    if not draft:
        return
    if is_remote(model):
        raise ValueError("a remote model takes no draft model: its server runs it (leave the draft model empty)")
    if speculative == "off":
        raise ValueError("a draft model guesses tokens: it does not go with guessing off")
    resolve_draft(draft, data_path)


class SessionSettingsScreen(ModalScreen[SessionSettings | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="settings.cancel"),
                Binding("ctrl+s", "save", "Save", id="settings.save")]

    def __init__(self, settings: SessionSettings, models: list[str], adapters: list[str], defaults: dict,
                 thinking_switch: bool = False, data_path: Path | None = None) -> None:
        """thinking_switch: the model's chat template takes enable_thinking (never for a remote model);
        data_path: the library a draft model's name is looked up in (None: the default one)."""
        super().__init__(classes="dialog-screen")
        self.settings, self.models, self.adapters, self.defaults = settings, models, adapters, defaults
        self.thinking_switch = thinking_switch
        self.data_path = data_path

    def compose(self):
        s = self.settings
        with VerticalScroll(classes="dialog wide", id="settings-form"):
            yield Label("Session settings", classes="dialog-title")
            yield Label("Model (library name or folder / .gguf path)")
            yield Input(s.model, id="model", compact=True,
                        suggester=SuggestFromList(self.models, case_sensitive=False))
            remote = [m for m in self.models if is_remote(m)]
            if remote:   # a remote model is written as listed: remote:ENDPOINT/ID
                yield Label("Remote: " + ", ".join(remote), id="remote-models", classes="hint")
            yield Label("Adapter (LoRA name; empty = base model)")
            yield Input(s.adapter or "", id="adapter", compact=True,
                        suggester=SuggestFromList(self.adapters, case_sensitive=False))
            yield Label("System prompt")
            yield TextArea(s.system_prompt, id="system_prompt", soft_wrap=True, compact=True)
            with Horizontal(classes="form-row"):
                yield Label("Chat template", classes="form-label")
                known = {value for _, value in TEMPLATE_CHOICES}
                yield MountSafeSelect(TEMPLATE_CHOICES, allow_blank=False, id="chat_template", compact=True,
                                      value=s.chat_template if s.chat_template in known else MODELS_OWN_OPTION)
            if self.thinking_switch:
                with Horizontal(classes="form-row"):
                    yield Label("Thinking", classes="form-label")
                    yield MountSafeSelect(THINKING_CHOICES, allow_blank=False, id="thinking", compact=True,
                                          value={None: "default", True: "on", False: "off"}[s.thinking])
            with Horizontal(classes="form-row"):
                yield Label("Guessing", classes="form-label")
                yield MountSafeSelect(GUESSING_CHOICES, allow_blank=False, id="speculative", compact=True,
                                      value=s.speculative or "default")
            with Horizontal(classes="form-row"):   # guesses where the text offers nothing to repeat
                yield Label("Draft model", classes="form-label")
                local = [m for m in self.models if not is_remote(m)]
                yield Input(s.draft_model or "", placeholder="none (a smaller model with the same tokenizer)",
                            id="draft_model", compact=True, suggester=SuggestFromList(local, case_sensitive=False))
            for name, label, _ in NUMBER_FIELDS:
                with Horizontal(classes="form-row"):
                    yield Label(label, classes="form-label")
                    value = getattr(s, name)
                    yield Input("" if value is None else str(value), placeholder=default_hint(name, self.defaults),
                                id=name, compact=True)
            yield Label("", id="settings-error", classes="error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Save (ctrl+s)", variant="primary", id="save", compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def on_mount(self) -> None:
        model = self.query("#model")
        if model:       # else quit right after F3: the dialog is taken down while it mounts
            model.first(Input).focus()

    def chat_template_choice(self) -> str:
        value = self.query_one("#chat_template", Select).value
        return MODELS_OWN if value in (MODELS_OWN_OPTION, Select.NULL) else str(value)

    def thinking_choice(self) -> bool | None:
        if not self.thinking_switch:
            return self.settings.thinking
        return {"on": True, "off": False}.get(self.query_one("#thinking", Select).value)

    def speculative_choice(self) -> str | None:
        value = self.query_one("#speculative", Select).value
        return None if value in ("default", Select.NULL) else str(value)

    def collect(self) -> SessionSettings:
        values = {name: parse_number(label, self.query_one(f"#{name}", Input).value, kind)
                  for name, label, kind in NUMBER_FIELDS}
        settings = replace(self.settings, model=self.query_one("#model", Input).value.strip(),
                           adapter=self.query_one("#adapter", Input).value.strip() or None,
                           system_prompt=self.query_one("#system_prompt", TextArea).text.strip(),
                           chat_template=self.chat_template_choice(), thinking=self.thinking_choice(),
                           speculative=self.speculative_choice(),
                           draft_model=self.query_one("#draft_model", Input).value.strip() or None, **values)
        check_adapter(settings.adapter, settings.model, self.adapters)
        check_draft(settings.draft_model, settings.model, settings.speculative, self.data_path)
        SamplingParams(max_tokens=settings.max_tokens, temperature=settings.temperature, top_p=settings.top_p,
                       top_k=settings.top_k, min_p=settings.min_p, seed=settings.seed).validate()
        return settings

    def action_save(self) -> None:
        try:
            self.dismiss(self.collect())
        except ValueError as exc:
            self.query_one("#settings-error", Label).update(str(exc))

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_save()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_save() if event.button.id == "save" else self.dismiss(None)
