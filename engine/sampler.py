"""Batched next-token selection: penalties, temperature, top-k, top-p, min-p, then greedy or a draw.

Order (as transformers' generate): repetition penalty -> presence/frequency penalties -> temperature
-> top-k -> top-p -> min-p. Greedy rows take the exact argmax. Seeded rows draw with their own
torch.Generator, reseeded from (seed, position of the token drawn) before each draw, so a seed gives the
same tokens whatever else shares the batch and however often the request was preempted; unseeded rows
share one draw.
"""
from __future__ import annotations

import torch

from .sequence import Sequence


def _pad(rows: list[list[int]]) -> torch.Tensor:
    """Ragged token lists -> [B, L] int64, padded with -1 (ignored by the scatter helpers)."""
    width = max((len(r) for r in rows), default=0) or 1
    out = torch.full((len(rows), width), -1, dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            out[i, :len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def _presence_mask(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    mask = torch.zeros(tokens.shape[0], vocab + 1, dtype=torch.bool)
    mask.scatter_(1, tokens.clamp(min=-1) % (vocab + 1), True)   # -1 lands in the spare last column
    return mask[:, :vocab]


def _counts(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    counts = torch.zeros(tokens.shape[0], vocab + 1, dtype=torch.float32)
    counts.scatter_add_(1, tokens % (vocab + 1), torch.ones_like(tokens, dtype=torch.float32))
    return counts[:, :vocab]


def apply_penalties(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    vocab = logits.shape[1]
    rep = torch.tensor([s.params.repetition_penalty for s in seqs], dtype=torch.float32)
    if bool((rep != 1.0).any()):
        # HF semantics over prompt + output: divide positive logits, multiply negative ones.
        seen = _presence_mask(_pad([s.token_ids for s in seqs]), vocab)
        r = rep[:, None].expand_as(logits)
        penalized = torch.where(logits > 0, logits / r, logits * r)
        logits = torch.where(seen, penalized, logits)
    pres = torch.tensor([s.params.presence_penalty for s in seqs], dtype=torch.float32)
    freq = torch.tensor([s.params.frequency_penalty for s in seqs], dtype=torch.float32)
    if bool((pres != 0).any() or (freq != 0).any()):
        # OpenAI semantics over generated tokens only.
        counts = _counts(_pad([s.output_token_ids for s in seqs]), vocab)
        logits = logits - freq[:, None] * counts - pres[:, None] * (counts > 0).float()
    return logits


def apply_top_k_top_p_min_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                            min_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) tokens outside each row's top-k / nucleus / min-p set. top_k <= 0 means off."""
    vocab = logits.shape[1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    if bool((k < vocab).any()):
        kth = logits.sort(dim=1, descending=True).values.gather(1, (k - 1)[:, None])
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if bool((top_p < 1.0).any()):
        sorted_logits, order = logits.sort(dim=1, descending=False)
        cum = sorted_logits.softmax(dim=1).cumsum(dim=1)
        drop = cum <= (1 - top_p)[:, None]
        drop[:, -1] = False                      # always keep the most likely token
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    if bool((min_p > 0).any()):
        probs = logits.softmax(dim=1)
        floor = min_p[:, None] * probs.max(dim=1, keepdim=True).values
        logits = logits.masked_fill(probs < floor, float("-inf"))
    return logits


def draw_seed(seed: int, position: int) -> int:
    """The generator seed of the draw for the token at `position` of a request seeded with `seed`
    (splitmix64 of the pair: nearby seeds and positions give unrelated streams)."""
    z = (seed * 0x9E3779B97F4A7C15 + position + 1) & 0xFFFF_FFFF_FFFF_FFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFF_FFFF_FFFF_FFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFF_FFFF_FFFF_FFFF
    return z ^ (z >> 31)


def _argmax_rows(logits: torch.Tensor) -> torch.Tensor:
    """Each row's argmax (the first index of its largest value, as argmax): torch's max reduction measured
    2.5x faster than its argmax on [16, 49152] (0.23 vs 0.58 ms, 2 threads)."""
    return logits.max(dim=1).indices


def _plain_greedy(p) -> bool:
    """Greedy with no penalty: the token is the plain argmax (what the full path below also returns)."""
    return (p.temperature == 0 and p.repetition_penalty == 1.0 and p.presence_penalty == 0
            and p.frequency_penalty == 0)


class Sampler:
    def __init__(self) -> None:
        self.shared_generator = torch.Generator().manual_seed(torch.seed() & 0xFFFF_FFFF)

    @torch.inference_mode()
    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        """logits fp32 [B, V] (row i for seqs[i]) -> one token id per row."""
        if all(_plain_greedy(s.params) for s in seqs):   # argmax only: no per-row parameter tensors
            return _argmax_rows(logits).tolist()
        logits = apply_penalties(logits.float(), seqs)
        temps = torch.tensor([s.params.temperature for s in seqs], dtype=torch.float32)
        greedy = temps == 0
        result = _argmax_rows(logits)
        if bool(greedy.all()):
            return result.tolist()
        sample_rows = (~greedy).nonzero().flatten()
        sub = logits[sample_rows] / temps[sample_rows, None]
        picked = [seqs[i] for i in sample_rows.tolist()]
        sub = apply_top_k_top_p_min_p(
            sub,
            torch.tensor([s.params.top_k for s in picked], dtype=torch.long),
            torch.tensor([s.params.top_p for s in picked], dtype=torch.float32),
            torch.tensor([s.params.min_p for s in picked], dtype=torch.float32),
        )
        probs = sub.softmax(dim=1)
        # Exponential race (Gumbel-max in disguise): argmax(p / E) with E ~ Exp(1) samples from p.
        noise = torch.empty_like(probs)
        unseeded = [j for j, s in enumerate(picked) if s.generator is None]
        if unseeded:
            noise[unseeded] = torch.empty(len(unseeded), probs.shape[1]).exponential_(
                generator=self.shared_generator)
        for j, s in enumerate(picked):
            if s.generator is not None:
                s.generator.manual_seed(draw_seed(s.params.seed, s.num_tokens))
                noise[j].exponential_(generator=s.generator)
        result[sample_rows] = (probs / noise).argmax(dim=1)
        return result.tolist()
