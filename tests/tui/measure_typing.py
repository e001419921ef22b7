"""Typing latency and event-loop lag while 8 sessions stream (real engine). A measurement, not a test:

    python tests/tui/measure_typing.py                 # a tiny random model whose replies run to max tokens
    MAXTOK=128 python tests/tui/measure_typing.py ~/.cache/llmchat-tests/smollm2/SmolLM2-135M-Instruct
"""
import asyncio, os, sys, tempfile, time, statistics
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
for k in ("LLMCHAT_DATA_DIR","LLMCHAT_CONFIG_DIR","HF_HUB_CACHE"): os.environ[k]=tempfile.mkdtemp()
open(os.environ["LLMCHAT_CONFIG_DIR"]+"/settings.toml","w").write("kv_cache_gb=0.1\nmemory_budget_gb=4.0\n")
from tiny_models import make_model
model = sys.argv[1] if len(sys.argv) > 1 else make_model(tempfile.mkdtemp(), "llama", eos_token_id=383)
from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.widgets.prompt_input import PromptInput
from helpers import *
async def main():
    app = LlmChatApp(model=str(model), show_welcome=False)
    async with app.run_test(size=(140,40)) as pilot:
        await open_with_model(pilot, app)
        for i in range(8):
            if i: await press(pilot, "ctrl+n", until=lambda: len(app.main_screen.sessions) == i + 1 and app.main_screen.current_id == max(app.main_screen.sessions))
            set_session(app, max_tokens=int(os.environ.get("MAXTOK", 400)))
            await send(pilot, f"question {i}")
        engine = next(iter(app.engines.loaded.values())).engine
        lags=[]; last=[time.monotonic()]
        def beat():
            now=time.monotonic(); lags.append(now-last[0]); last[0]=now
        timer = app.set_interval(0.01, beat)
        prompt = app.query_one(PromptInput); prompt.focus()
        key_lat=[]; running=[]
        t0=time.monotonic()
        while app.main_screen.replies and time.monotonic()-t0 < 60:
            running.append(engine.metrics().num_running)
            n=len(prompt.text); t=time.monotonic(); app.simulate_key("x")
            while len(prompt.text)==n: await asyncio.sleep(0.001)
            key_lat.append(time.monotonic()-t)
            await asyncio.sleep(0.05)
        timer.stop()
        gen = sum(m.stats.num_generated_tokens for s in app.main_screen.sessions.values() for m in s.messages if m.stats)
        print(f"8 sessions, {gen} tokens in {time.monotonic()-t0:.1f}s, max running {max(running)}")
        print(f"keystroke->input latency ms: median {statistics.median(key_lat)*1000:.1f} p95 {sorted(key_lat)[int(len(key_lat)*.95)]*1000:.1f} max {max(key_lat)*1000:.1f} (n={len(key_lat)})")
        print(f"event loop 10ms-timer gaps ms: median {statistics.median(lags)*1000:.1f} p95 {sorted(lags)[int(len(lags)*.95)]*1000:.1f} max {max(lags)*1000:.1f}")
asyncio.run(main())
