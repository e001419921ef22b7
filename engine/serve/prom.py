"""GET /metrics in Prometheus' text format: engine gauges read from each engine's snapshot at scrape time,
request histograms (TTFT, time per output token) and counters observed by the server."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)


class EngineCollector:
    """Gauges of every loaded engine, labelled by base model id."""

    def __init__(self, state):
        self.state = state

    def collect(self):
        gauges = {
            "generation_tokens_per_second": ("generation tokens/s over the last seconds", "generation_tokens_per_s"),
            "prompt_tokens_per_second": ("prompt tokens/s computed over the last seconds", "prompt_tokens_per_s"),
            "kv_cache_usage_ratio": ("KV cache blocks in use, 0..1", "kv_cache_usage"),
            "prefix_cache_hit_rate": ("prompt tokens served from the prefix cache (RAM or disk) / looked up",
                                      "prefix_cache_hit_rate"),
            "prefix_cache_disk_hit_rate": ("prompt tokens read from the KV disk tier / looked up",
                                           "prefix_disk_hit_rate"),
            "num_requests_running": ("requests in the running batch", "num_running"),
            "num_requests_waiting": ("requests waiting to be scheduled", "num_waiting"),
        }
        snapshots = [(model_id, engine.metrics()) for model_id, engine in list(self.state.engines.items())]
        for name, (doc, attr) in gauges.items():
            family = GaugeMetricFamily(f"llmchat_{name}", doc, labels=["model"])
            for model_id, snap in snapshots:
                family.add_metric([model_id], float(getattr(snap, attr)))
            yield family
        per_adapter = GaugeMetricFamily("llmchat_num_requests_running_per_adapter",
                                        "running requests per LoRA adapter", labels=["model", "adapter"])
        for model_id, snap in snapshots:
            for adapter, count in snap.running_per_adapter.items():
                per_adapter.add_metric([model_id, adapter], count)
        yield per_adapter
        for name, attr, doc in (("prompt_tokens", "total_prompt_tokens", "prompt tokens computed (cache hits excluded)"),
                                ("generation_tokens", "total_generation_tokens", "tokens generated"),
                                ("preemptions", "num_preemptions", "requests preempted for KV space"),
                                ("prefix_cache_disk_hit_tokens", "prefix_disk_hit_tokens",
                                 "prompt tokens read from the KV disk tier instead of computed"),
                                ("spec_guessed_tokens", "spec_guessed_tokens", "speculation: tokens guessed"),
                                ("spec_accepted_tokens", "spec_accepted_tokens",
                                 "speculation: guessed tokens the model agreed with"),
                                ("spec_verifications", "spec_verifications",
                                 "speculation: a request's steps that verified guesses")):
            family = CounterMetricFamily(f"llmchat_{name}", doc, labels=["model"])
            for model_id, snap in snapshots:
                family.add_metric([model_id], float(getattr(snap, attr)))
            yield family
        for name, attr, doc in (("spec_acceptance_ratio", "spec_acceptance_rate", "speculation: guesses held / made"),
                                ("spec_tokens_per_verification", "spec_tokens_per_verification",
                                 "speculation: tokens a request gets from a step that verified guesses")):
            family = GaugeMetricFamily(f"llmchat_{name}", doc, labels=["model"])
            for model_id, snap in snapshots:
                value = getattr(snap, attr)
                if value is not None:   # no guesses yet: no sample rather than a made-up 0
                    family.add_metric([model_id], value)
            yield family
        pending = GaugeMetricFamily("llmchat_server_pending_requests", "requests admitted by the server")
        pending.add_metric([], self.state.pending)
        yield pending


class ServerMetrics:
    def __init__(self, state):
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(state))
        self.ttft = Histogram("llmchat_time_to_first_token_seconds", "time to the first token", ["model"],
                              buckets=TTFT_BUCKETS, registry=self.registry)
        self.tpot = Histogram("llmchat_time_per_output_token_seconds", "decode time per token after the first",
                              ["model"], buckets=TPOT_BUCKETS, registry=self.registry)
        self.finished = Counter("llmchat_requests", "finished requests by reason", ["model", "finish_reason"],
                                registry=self.registry)

    def observe(self, model_id: str, metrics, reason: str | None) -> None:
        self.finished.labels(model_id, reason or "abort").inc()
        if metrics is None:
            return
        if metrics.ttft is not None:
            self.ttft.labels(model_id).observe(metrics.ttft)
        rate = metrics.decode_tokens_per_s
        if rate:
            self.tpot.labels(model_id).observe(1.0 / rate)
