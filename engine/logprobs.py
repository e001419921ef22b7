"""Log-probabilities of sampled tokens, for requests that ask for them (OpenAI's logprobs/top_logprobs).

They describe the model's own distribution: log_softmax of the raw logits, before penalties, temperature
and top-k/top-p (as vLLM reports by default). Only the rows that asked pay for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

MAX_TOP_LOGPROBS = 20


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)   # the k most likely (token id, logprob)


def wanted(seqs) -> bool:
    return any(s.params.logprobs is not None for s in seqs)


@torch.inference_mode()
def token_logprobs(logits: torch.Tensor, tokens: list[int], seqs) -> list[TokenLogprob | None]:
    """logits [B, V] (row i for seqs[i]) and the tokens picked -> one entry per row (None where not asked)."""
    out: list[TokenLogprob | None] = [None] * len(seqs)
    rows = [i for i, s in enumerate(seqs) if s.params.logprobs is not None]
    if not rows:
        return out
    logp = torch.log_softmax(logits[rows].float(), dim=-1)
    k = max(seqs[i].params.logprobs for i in rows)
    top_values, top_ids = logp.topk(k, dim=-1) if k else (None, None)
    chosen = logp.gather(1, torch.tensor([[tokens[i]] for i in rows])).flatten().tolist()
    for j, i in enumerate(rows):
        n = seqs[i].params.logprobs
        top = list(zip(top_ids[j, :n].tolist(), top_values[j, :n].tolist())) if n else []
        out[i] = TokenLogprob(tokens[i], chosen[j], top)
    return out
