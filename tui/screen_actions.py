"""App actions that open screens: session settings, models, compare, compare reports, help, first run."""
from __future__ import annotations

from .chat_state import SessionSettings
from .engines import read_generation_defaults, resolve_model
from .remote_models import is_remote
from .screens.dialogs import TextPrompt
from .screens.help_screen import HelpScreen
from .screens.session_settings import SessionSettingsScreen
from .screens.welcome import WelcomeScreen


class ScreenActions:
    def known_models(self) -> list[str]:
        names = {s.settings.model for s in self.sessions.values() if s.settings.model}
        names.update(self.library_names("model"))
        names.update(self.remote_names)
        if self.settings.default_model:
            names.add(self.settings.default_model)
        return sorted(names)

    def model_defaults(self, model: str) -> dict:
        """What an unset sampling field becomes for this model ({} for a remote one: its server decides)."""
        if is_remote(model):
            return {}
        try:
            path = resolve_model(model, self.data_path) if model else None
        except (FileNotFoundError, ValueError, OSError):
            path = None
        return read_generation_defaults(path)

    def action_session_settings(self) -> None:
        session = self.current
        if session is None:
            return
        screen = SessionSettingsScreen(session.settings, self.known_models(), self.library_names("adapter"),
                                       self.model_defaults(session.settings.model))
        self.push_screen(screen, lambda result: self.apply_session_settings(session, result))

    def apply_session_settings(self, session, result: SessionSettings | None) -> None:
        if result is None:
            return
        model_changed = result.model != session.settings.model
        session.settings = result
        self.db.save_settings(session.id, result)
        self.refresh_session_item(session.id)
        if model_changed and result.model and not self.engines.is_loaded(result.model):
            self.load_model(result.model)
        self.notify("Session settings saved", timeout=3)

    def use_model(self, model: str) -> None:
        """From the Models screen: the current session uses this model (loaded now); it becomes the default."""
        session = self.current
        if session is not None and session.id not in self.replies:
            session.settings.model = model
            self.db.save_settings(session.id, session.settings)
            self.refresh_session_item(session.id)
        if not self.settings.default_model:
            self.settings.default_model = model
            try:
                self.settings_store.save(self.settings)
            except (ValueError, OSError) as exc:
                self.notify(str(exc), severity="warning")
        self.load_model(model)

    def attach_adapter(self, adapter: str | None) -> None:
        session = self.current
        if session is not None:
            session.settings.adapter = adapter
            self.db.save_settings(session.id, session.settings)
            self.refresh_session_item(session.id)
            self.notify(f"Adapter {adapter} attached to this session" if adapter else "Adapter detached")

    def action_models(self, tab: str = "library") -> None:
        from .screens.models_screen import ModelsScreen
        self.push_screen(ModelsScreen(initial_tab=tab))

    def action_compare(self) -> None:
        from .screens.compare_screen import CompareScreen
        self.push_screen(CompareScreen(self.known_models(), self.library_names("adapter")))

    def action_open_compare_report(self) -> None:
        from .screens.compare_report import CompareReportScreen, load_report

        def opened(path: str | None) -> None:
            if path:
                try:
                    self.push_screen(CompareReportScreen(load_report(path)))
                except (OSError, ValueError) as exc:
                    self.notify(f"Cannot open {path}: {exc}", severity="error")
        self.push_screen(TextPrompt("Open compare report (JSON file)", placeholder="path/to/report.json"), opened)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.screen))

    def action_welcome(self) -> None:
        def chosen(choice: str | None) -> None:
            if choice == "models":
                self.action_models("search")
            elif choice == "import":
                self.action_models("import")
        self.push_screen(WelcomeScreen(), chosen)
