"""Make the README's screenshot from the real app: `python assets/make_screenshots.py MODEL`.

MODEL is anything `llmchat --model` takes (a library name, a folder or a .gguf file). The app runs headless in
an empty data dir, two sessions ask their questions, and Textual's SVG screenshot of the chat screen is written
to assets/screenshot.svg once both replies are done.
"""
from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUESTIONS = ["What is the capital of France? Answer in one sentence.",
             "Write a Python function that reverses a string."]


async def shoot(model: str, out: Path) -> None:
    from llmchat.tui.app import LlmChatApp
    from llmchat.tui.app.main import prepare_model
    from llmchat.tui.app.widgets.prompt_input import PromptInput

    app = LlmChatApp(model=prepare_model(model), show_welcome=False)
    async with app.run_test(size=(120, 34)) as pilot:
        while not app.engines.loaded:
            await asyncio.sleep(0.1)
        for n, question in enumerate(QUESTIONS):
            if n:
                await pilot.press("ctrl+n")
                await pilot.pause()
            prompt = app.query_one(PromptInput)
            prompt.load_text(question)
            prompt.focus()
            await pilot.press("enter")
        while app.main_screen.replies:
            await asyncio.sleep(0.1)
        app.clear_notifications()
        await pilot.pause(1.0)
        app.save_screenshot(filename=out.name, path=str(out.parent))


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(LLMCHAT_DATA_DIR=str(Path(tmp) / "data"), LLMCHAT_CONFIG_DIR=str(Path(tmp) / "config"))
        (Path(tmp) / "config").mkdir()
        (Path(tmp) / "config" / "settings.toml").write_text("kv_cache_gb = 0.25\n")
        asyncio.run(shoot(sys.argv[1], HERE / "screenshot.svg"))
    print(f"wrote {HERE / 'screenshot.svg'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
