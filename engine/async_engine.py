"""Streaming API for event loops (the TUI): the model loop runs in its own thread.

generate() validates in the caller's thread (ValueError before the first delta), then hands the
sequence to the engine thread through a command queue. The engine thread delivers each delta to the
request's asyncio.Queue with loop.call_soon_threadsafe, so the event loop never waits on the model.
Leaving the async-for early, or cancelling the task, aborts the request and frees its blocks.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading

from .llm import build_config
from .llm_engine import LLMEngine
from .metrics import MetricsSnapshot
from .outputs import StreamDelta
from .sampling_params import SamplingParams

log = logging.getLogger(__name__)
_request_ids = itertools.count()


class AsyncEngine:
    def __init__(self, model_path, load_progress=None, **kwargs):
        """model_path: a model folder, a .gguf file or a library name (as LLM); kwargs: EngineConfig fields.
        load_progress(bytes done, bytes in all) is called while the weights are read and prepared (on the
        constructing thread; see model_loader.LoadProgress)."""
        self.engine = LLMEngine(build_config(model_path, kwargs), load_progress)
        self._commands: queue.SimpleQueue = queue.SimpleQueue()   # ("add", seq, sink) | ("abort", id) | ("stop",)
        self._sinks: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="llmchat-engine", daemon=True)
        self._thread.start()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def config(self):
        return self.engine.config

    @property
    def max_model_len(self) -> int:
        """Prompt + generated tokens a request may hold (the server lists it per model)."""
        return self.engine.max_model_len

    def metrics(self) -> MetricsSnapshot:
        return self.engine.metrics_snapshot()

    async def generate(self, prompt, params: SamplingParams | None = None, adapter: str | None = None,
                       request_id: str | None = None):
        """Async iterator of StreamDelta; the last one has finished=True and a finish_reason."""
        if self._closed:
            raise RuntimeError("the engine is shut down")
        request_id = request_id if request_id is not None else f"req-{next(_request_ids)}"
        if adapter is not None:   # (re)load from disk in a worker thread: neither the UI nor other streams wait
            await asyncio.to_thread(self.engine.lora.ensure, adapter)
        if params is not None and params.structured_outputs is not None:   # compiling a grammar takes a while
            seq = await asyncio.to_thread(self.engine.make_sequence, prompt, params, adapter, request_id)
        else:
            seq = self.engine.make_sequence(prompt, params, adapter, request_id)   # ValueError here
        sink: asyncio.Queue = asyncio.Queue()
        self._send(("add", seq, (asyncio.get_running_loop(), sink)))
        finished = False
        try:
            while True:
                delta: StreamDelta = await sink.get()
                finished = delta.finished
                yield delta
                if finished:
                    return
        finally:
            if not finished:   # the consumer left early or was cancelled
                self.abort(request_id)

    async def load_adapter(self, name: str, path) -> None:
        """Load (or replace) a LoRA adapter while other requests stream; ValueError if it does not fit."""
        await asyncio.to_thread(self.engine.load_adapter, name, path)

    def unload_adapter(self, name: str) -> None:
        self.engine.unload_adapter(name)

    def abort(self, request_id: str) -> None:
        """Abort a request from any thread; its stream ends with finish_reason "abort"."""
        self._send(("abort", request_id))

    async def shutdown(self) -> None:
        """Abort everything, stop the engine thread and wait for it."""
        if self._closed:
            return
        self._closed = True
        self._send(("stop",))
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        # the last reply's blocks reach the disk tier before the engine is gone (the app reopens chats warm)
        await asyncio.get_running_loop().run_in_executor(None, self.engine.close, 30.0)

    # ---- engine thread --------------------------------------------------------------------------
    def _send(self, command: tuple) -> None:
        self._commands.put(command)
        self._wake.set()

    def _loop(self) -> None:
        while True:
            if not self._drain_commands():
                break
            if not self.engine.has_unfinished():
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                deltas = self.engine.step()
            except Exception as exc:   # never leave a stream hanging: fail what was running
                log.exception("engine step failed")
                deltas = self._fail_all(exc)
            for delta in deltas:
                self._deliver(delta)
        for request_id in list(self.engine.requests):
            self.engine.abort(request_id)
        for delta in self.engine.step() if self.engine.has_unfinished() else []:
            self._deliver(delta)

    def _drain_commands(self) -> bool:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return True
            if command[0] == "stop":
                return False
            if command[0] == "add":
                _, seq, sink = command
                self._sinks[seq.request_id] = sink
                try:
                    self.engine.add_sequence(seq)
                except ValueError as exc:
                    log.error("rejected request %s: %s", seq.request_id, exc)
                    self._deliver(StreamDelta(seq.request_id, "", [], True, "error"))
            elif command[0] == "abort":
                self.engine.abort(command[1])

    def _fail_all(self, exc: Exception) -> list[StreamDelta]:
        deltas = []
        for request_id, seq in list(self.engine.requests.items()):
            self.engine.scheduler.finish(seq, "error")
            self.engine.requests.pop(request_id, None)
            deltas.append(StreamDelta(request_id, "", [], True, "error"))
        log.error("failed %d request(s): %s", len(deltas), exc)
        return deltas

    def _deliver(self, delta: StreamDelta) -> None:
        sink = self._sinks.get(delta.request_id)
        if sink is None:
            return
        if delta.finished:
            del self._sinks[delta.request_id]
        loop, q = sink
        try:
            loop.call_soon_threadsafe(q.put_nowait, delta)
        except RuntimeError:
            pass   # the consumer's event loop is closed; nothing to deliver to
