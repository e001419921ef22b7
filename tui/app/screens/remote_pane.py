"""The Models screen's Remote tab: the models of each OpenAI-compatible endpoint, marked remote; Enter uses one."""
from __future__ import annotations

from textual import work
from textual.css.query import NoMatches
from textual.widgets import DataTable, Label, TabPane

from llmchat.engine.remote import RemoteError, list_models


class RemotePane(TabPane):
    def __init__(self) -> None:
        super().__init__("Remote", id="remote")

    def compose(self):
        yield DataTable(id="remote-table", cursor_type="row")
        yield Label("Enter: use in this session · endpoints: [[endpoints]] in settings.toml or --endpoint NAME=URL",
                    classes="hint")

    def on_mount(self) -> None:
        self.query_one("#remote-table", DataTable).add_columns("model", "endpoint", "where", "status")
        self.refresh_remote()

    @work(exclusive=True, group="remote")
    async def refresh_remote(self) -> None:
        remote = self.app.engines.remote
        rows = []
        for endpoint in remote.endpoints:
            try:
                ids = await list_models(endpoint)
                rows += [(endpoint.model_name(i), i, endpoint.name, endpoint.base_url, "remote") for i in ids]
            except RemoteError as exc:
                rows.append((None, "-", endpoint.name, endpoint.base_url, f"unreachable: {exc}"))
        try:
            table = self.query_one("#remote-table", DataTable)
        except NoMatches:
            return      # the screen closed meanwhile
        table.clear()
        for key, model_id, name, url, status in rows:
            table.add_row(model_id, name, url, status, key=key or f"error:{name}")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id != "remote-table":
            return
        event.stop()
        key = event.row_key.value
        if key.startswith("error:"):
            self.notify(f"Endpoint {key[6:]} is unreachable; check it is running", severity="warning")
            return
        self.app.chat.use_model(key)
        self.notify(f"{key} is this session's model")
        self.app.pop_screen()
