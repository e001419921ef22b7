"""Runs a compare: for each model, one engine and one batched generate over all its pending prompts.

Models run one after another; each engine is dropped (del + gc) before the next loads, so peak memory
is one model plus its KV budget. Each result is appended to the store the moment its request finishes
(LLM.generate's on_output), and the report is rewritten after every model, so a killed run loses only
the requests in flight.
A model or adapter that fails is recorded and the run goes on with the others.
"""
from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

from llmchat.engine.compare.plan import Variant
from llmchat.engine.compare.prompts import PromptItem
from llmchat.engine.compare.report import CompareInputs, VariantStatus, build_report, result_key
from llmchat.engine.compare.store import ResultStore
from llmchat.engine.compare.writers import write_report
from llmchat.engine.outputs import RequestOutput
from llmchat.engine.remote import RemoteLLM, find_endpoint, is_remote, split_remote
from llmchat.engine.store import resolve_model

Progress = Callable[[int, int, str], None]      # (done, total, what is happening)


def default_resolver(name_or_path: str) -> Path | str:
    """The model store's rule (a folder, a .gguf file registered in place, a library name); a remote model
    ("remote:ENDPOINT/ID") stays its name."""
    if is_remote(name_or_path):
        split_remote(name_or_path)               # ValueError when malformed
        return name_or_path
    return resolve_model(name_or_path)


def resolver_for(endpoints=()) -> Callable[[str], Path | str]:
    """default_resolver that also checks a remote model's endpoint is known (before any long work)."""
    def resolve(name_or_path: str):
        if is_remote(name_or_path):
            find_endpoint(list(endpoints), split_remote(name_or_path)[0])
        return default_resolver(name_or_path)
    return resolve


def engine_factory(endpoints=()) -> Callable:
    """make_engine for the runner: the local LLM for a folder, a RemoteLLM for "remote:ENDPOINT/ID" (both
    BatchClients, engine/client.py)."""
    def make_engine(path, settings):
        if is_remote(str(path)):
            name, model_id = split_remote(str(path))
            return RemoteLLM(find_endpoint(list(endpoints), name), model_id)
        from llmchat.engine import LLM   # torch and the model code (~2 s): for a local model, when it runs
        return LLM(path, dtype=settings.dtype, kv_cache_gb=settings.kv_cache_gb)
    return make_engine


default_engine = engine_factory()


class CompareRunner:
    def __init__(self, inputs: CompareInputs, store: ResultStore, out_dir: str | Path,
                 progress: Progress | None = None, resolve: Callable[[str], Path] = default_resolver,
                 make_engine: Callable = default_engine):
        self.inputs, self.store, self.out_dir = inputs, store, Path(out_dir)
        self.progress = progress or (lambda done, total, what: None)
        self.resolve, self.make_engine = resolve, make_engine
        self.total = len(inputs.variants) * len(inputs.prompts)
        self.done = 0

    def run(self) -> dict:
        """Run everything still missing; returns the final report (also written to out_dir)."""
        inputs = self.inputs
        self.done = sum(1 for v in inputs.variants for p in inputs.prompts if self._key(v, p) in self.store)
        paths = self._resolve_models()
        self.write()
        for model, variants in self._by_model().items():
            if paths.get(model) is not None:
                self._run_model(paths[model], variants)
            self.write()
        self.progress(self.done, self.total, "done")
        return self.write()

    def write(self) -> dict:
        report = build_report(self.inputs, self.store)
        write_report(report, self.out_dir)
        return report

    def _key(self, variant: Variant, item: PromptItem):
        return result_key(variant, item, self.inputs.settings)

    def _by_model(self) -> dict[str, list[Variant]]:
        groups: dict[str, list[Variant]] = {}
        for v in self.inputs.variants:
            groups.setdefault(v.model, []).append(v)
        return groups

    def _resolve_models(self) -> dict[str, Path | None]:
        """Resolve every model first, so an unknown name is reported before any long work."""
        paths = {}
        for model, variants in self._by_model().items():
            try:
                paths[model] = self.resolve(model)
            except FileNotFoundError as exc:
                paths[model] = None
                self._fail(variants, "model", f"unknown model {model!r}: {_message(exc)}")
            except Exception as exc:  # noqa: BLE001 - found but unusable (unsupported, incomplete, ...)
                paths[model] = None
                self._fail(variants, "model", f"model {model!r} cannot be used: {_message(exc)}")
            for v in variants:
                self.inputs.status.setdefault(v.id, VariantStatus()).path = (
                    None if paths[model] is None else str(paths[model]))
        return paths

    def _fail(self, variants: list[Variant], kind: str, message: str) -> None:
        for v in variants:
            st = self.inputs.status.setdefault(v.id, VariantStatus())
            st.status, st.kind, st.error = "error", kind, message
            self.done += sum(1 for p in self.inputs.prompts if self._key(v, p) not in self.store)
        self.progress(self.done, self.total, message)

    def _run_model(self, path: Path | str, variants: list[Variant]) -> None:
        jobs = [(v, p) for v in variants for p in self.inputs.prompts if self._key(v, p) not in self.store]
        name = variants[0].id                     # the base model's short label
        if not jobs:
            self._mark_ok(variants)
            return
        self.progress(self.done, self.total, f"loading {name}")
        try:
            llm = self.make_engine(path, self.inputs.settings)
        except Exception as exc:  # noqa: BLE001 - a model that fails to load must not stop the others
            self._fail(variants, "model", f"cannot load model {variants[0].model!r}: {_message(exc)}")
            return
        try:
            jobs = self._load_adapters(llm, variants, jobs)
            self._generate(llm, jobs, path, name)
            self._mark_ok([v for v in variants if self.inputs.status[v.id].status != "error"])
            self.progress(self.done, self.total, f"finished {name}")
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: record it, go on with the next model
            running = [v for v in variants if self.inputs.status[v.id].status != "error"]
            self._fail(running, "model", f"model {variants[0].model!r} failed while generating: {_message(exc)}")
        finally:
            close = getattr(llm, "shutdown", None) or getattr(llm, "close", None)
            if callable(close):
                close()
            del llm
            gc.collect()            # free weights and KV cache before the next model loads

    def _load_adapters(self, llm, variants, jobs):
        for v in variants:
            if v.adapter is None or not any(jv is v for jv, _ in jobs):
                continue
            try:   # the engine takes a folder or a model-store name, and checks the adapter fits
                llm.load_adapter(v.adapter_name, v.adapter)
            except Exception as exc:  # noqa: BLE001
                self._fail([v], "adapter", f"adapter {v.adapter!r} cannot be used with {v.model!r}: {_message(exc)}")
                jobs = [(jv, p) for jv, p in jobs if jv is not v]
        return jobs

    def _generate(self, llm, jobs, path: Path, name: str) -> None:
        """One batched call; each result is saved the moment its request finishes. If the engine
        rejects the batch up front (a bad request), run the rest one by one to pin the bad ones."""
        if not jobs:
            return
        raw = self.inputs.settings.raw
        prompts = [p.engine_input(raw) for _, p in jobs]
        params = [self.inputs.settings.sampling_params(p.index, p.schema) for _, p in jobs]
        adapters = [v.adapter_name for v, _ in jobs]
        saved: set[int] = set()

        def save(i: int, out) -> None:
            self.store.append([self._record(*jobs[i], path, out)])
            saved.add(i)
            self.done += 1
            self.progress(self.done, self.total, f"generating {name}")

        self.progress(self.done, self.total, f"generating {name} ({len(jobs)} requests)")
        try:
            llm.generate(prompts, params, adapter=adapters if any(adapters) else None, on_output=save)
            return
        except ValueError:
            pass
        for i, (prompt, param, adapter) in enumerate(zip(prompts, params, adapters)):
            if i in saved:
                continue
            try:
                out = llm.generate([prompt], param, adapter=adapter)[0]
            except ValueError as exc:
                out = _error_output(str(exc))
            save(i, out)

    def _record(self, v: Variant, p: PromptItem, path: Path, out) -> dict:
        m = out.metrics
        key = self._key(v, p)
        ttft = m.ttft if out.error is None else None
        prompt_tokens = m.num_prompt_tokens or len(out.prompt_token_ids)
        return {"model": key[0], "adapter": key[1], "prompt_index": key[2], "prompt_hash": key[3],
                "settings_hash": key[4], "model_path": str(path),
                "text": out.text, "token_ids": list(out.token_ids), "finish_reason": out.finish_reason,
                "error": out.error, "ttft": ttft, "decode_tok_s": m.decode_tokens_per_s,
                "prompt_tok_s": (prompt_tokens - m.num_cached_tokens) / ttft if ttft else None,
                "prompt_tokens": prompt_tokens, "cached_tokens": m.num_cached_tokens,
                "generated_tokens": m.num_generated_tokens or len(out.token_ids),
                "preemptions": m.num_preemptions}

    def _mark_ok(self, variants: list[Variant]) -> None:
        for v in variants:
            self.inputs.status.setdefault(v.id, VariantStatus()).status = "ok"


def _error_output(message: str):
    return RequestOutput(request_id="", prompt_token_ids=[], token_ids=[], text="", finish_reason="error",
                         error=message)


def _message(exc: BaseException) -> str:
    text = str(exc).strip()
    return text if text else type(exc).__name__
