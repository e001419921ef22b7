"""Export one session to Markdown (for people) and JSON (for programs)."""
from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

from .chat_state import ChatSession


def session_to_markdown(session: ChatSession) -> str:
    lines = [f"# {session.title}", ""]
    s = session.settings
    lines.append(f"- model: {s.model or '(none)'}" + (f", adapter: {s.adapter}" if s.adapter else ""))
    if s.system_prompt:
        lines += ["", "**System:** " + s.system_prompt]
    for message in session.messages:
        lines += ["", f"## {message.role.capitalize()}", "", message.content]
        if message.stats:
            lines += ["", f"*{message.stats.line()}*"]
    return "\n".join(lines) + "\n"


def session_to_json(session: ChatSession) -> str:
    data = {
        "title": session.title,
        "settings": session.settings.to_dict(),
        "messages": [{"role": m.role, "content": m.content, "finish_reason": m.finish_reason,
                      "model": m.model, "adapter": m.adapter,
                      "stats": asdict(m.stats) if m.stats else None} for m in session.messages],
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def export_session(session: ChatSession, folder: Path) -> tuple[Path, Path]:
    """Write <slug>.md and <slug>.json into folder; returns both paths."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", session.title).strip("-").lower() or "session"
    base = folder / f"{slug}-{session.id}"
    md, js = base.with_suffix(".md"), base.with_suffix(".json")
    md.write_text(session_to_markdown(session), encoding="utf-8")
    js.write_text(session_to_json(session), encoding="utf-8")
    return md, js
