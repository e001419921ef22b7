"""Results of a compare run, appended to DIR/results.jsonl as they complete, so a killed run can resume.

One JSON object per line. A record is identified by (model, adapter, prompt index, prompt hash,
settings hash): change the prompt text or a sampling setting and the old record no longer matches.
A last line cut short by a kill is ignored (and overwritten on the next append).
"""
from __future__ import annotations

import json
from pathlib import Path

Key = tuple[str, str | None, int, str, str]


def record_key(record: dict) -> Key:
    return (record["model"], record["adapter"], record["prompt_index"], record["prompt_hash"],
            record["settings_hash"])


class ResultStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.records: dict[Key, dict] = {}
        self.skipped_lines = 0         # unreadable lines (a kill mid-write), reported, never fatal

    def load(self) -> "ResultStore":
        """Read what earlier runs wrote; a later record for the same key wins."""
        if not self.path.exists():
            return self
        data = self.path.read_bytes()
        lines = data.splitlines(keepends=True)
        for number, raw in enumerate(lines, start=1):
            record = _parse(raw)
            torn_tail = number == len(lines) and not raw.endswith(b"\n")
            if record is None:
                if torn_tail:      # a kill mid-write: drop the fragment so the next append starts clean
                    with open(self.path, "r+b") as f:
                        f.truncate(len(data) - len(raw))
                else:
                    self.skipped_lines += 1
                continue
            if torn_tail:          # whole record, newline not yet written
                with open(self.path, "ab") as f:
                    f.write(b"\n")
            self.records[record_key(record)] = record
        return self

    def get(self, key: Key) -> dict | None:
        return self.records.get(key)

    def __contains__(self, key: Key) -> bool:
        return key in self.records

    def append(self, records: list[dict]) -> None:
        """Write records before they count as done. Flushed to the OS, which keeps them if the process is
        killed; no fsync per record (a power cut may lose the last few: they are simply run again)."""
        if not records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
        for record in records:
            self.records[record_key(record)] = record


def _parse(raw: bytes) -> dict | None:
    try:
        record = json.loads(raw)
        record_key(record)
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        return None
    return record
