"""Sampler: each knob shapes the distribution as it should; seeds reproduce whatever the batch."""
from __future__ import annotations

import torch

from llmchat.engine.sampler import Sampler, apply_penalties
from llmchat.engine.sampling_params import SamplingParams
from llmchat.engine.sequence import Sequence

V = 8


def seq(prompt=(0,), output=(), seed=None, **params) -> Sequence:
    p = SamplingParams(max_tokens=100, seed=seed, **params).with_defaults({})
    s = Sequence(list(prompt), p)
    s.token_ids += list(output)
    if seed is not None:
        s.generator = torch.Generator().manual_seed(seed)
    return s


LOGITS = torch.tensor([3.0, 2.5, 2.0, 1.0, 0.5, 0.0, -1.0, -2.0])


def histogram(n=600, **params) -> torch.Tensor:
    sampler = Sampler()
    seqs = [seq(**params) for _ in range(n)]
    tokens = sampler(LOGITS.repeat(n, 1), seqs)
    return torch.bincount(torch.tensor(tokens), minlength=V).float() / n


def test_greedy_is_exact_argmax_per_row():
    logits = torch.randn(5, 50)
    tokens = Sampler()(logits, [seq(temperature=0.0) for _ in range(5)])
    assert tokens == logits.argmax(dim=1).tolist()


def test_temperature_sharpens_and_flattens():
    # Unseeded draws: enough of them that the frequencies sit within ~7 standard deviations of softmax(l/T).
    n = 4000
    cold, hot = histogram(n, temperature=0.2), histogram(n, temperature=5.0)
    assert abs(cold[0] - (LOGITS / 0.2).softmax(0)[0]) < 0.03      # ~0.92: sharpened
    assert abs(hot[0] - (LOGITS / 5.0).softmax(0)[0]) < 0.03       # ~0.19: flattened
    assert (hot > 0).sum() >= 6


def test_top_k_keeps_only_k_tokens():
    h = histogram(temperature=1.0, top_k=2)
    assert h[2:].sum() == 0 and h[0] > 0 and h[1] > 0


def test_top_p_keeps_the_nucleus():
    probs = LOGITS.softmax(0)           # 0.43, 0.26, 0.16, ...: top_p=0.6 keeps the first two
    assert probs[0] < 0.6 < probs[:2].sum()
    h = histogram(temperature=1.0, top_p=0.6)
    assert h[2:].sum() == 0 and h[1] > 0


def test_min_p_drops_tokens_below_fraction_of_best():
    h = histogram(temperature=1.0, min_p=0.3)   # keeps p >= 0.3 * p_max: tokens 0, 1, 2 (e^-1 = 0.37)
    assert h[3:].sum() == 0 and h[2] > 0


def test_repetition_penalty_hf_semantics_over_prompt_and_output():
    logits = torch.tensor([[2.0, -1.0, 1.0, 0.5]])
    out = apply_penalties(logits, [seq(prompt=(0,), output=(1,), repetition_penalty=2.0)])
    assert out.tolist() == [[1.0, -2.0, 1.0, 0.5]]     # positive divided, negative multiplied, others kept


def test_presence_and_frequency_penalties_count_output_only():
    logits = torch.zeros(1, 4)
    s = seq(prompt=(3, 3), output=(1, 1, 2), presence_penalty=0.5, frequency_penalty=0.25)
    out = apply_penalties(logits, [s])
    assert out.tolist() == [[0.0, -1.0, -0.75, 0.0]]


def test_penalty_steers_greedy_choice():
    logits = torch.tensor([[2.0, 1.9, 0.0]])
    assert Sampler()(logits, [seq(output=(0,), temperature=0.0, repetition_penalty=1.5)]) == [1]


def test_same_seed_same_tokens_whatever_the_batch():
    def draw(batch_extra: int, order_first: bool):
        sampler = Sampler()
        target = seq(seed=1234, temperature=1.0)
        others = [seq(temperature=1.0, seed=None if i % 2 else i) for i in range(batch_extra)]
        others += [seq(temperature=0.0)]
        batch = [target] + others if order_first else others + [target]
        logits = torch.randn(len(batch), 64, generator=torch.Generator().manual_seed(0))
        idx = batch.index(target)
        logits[idx] = torch.linspace(-1, 1, 64)
        out = []
        for _ in range(10):
            out.append(sampler(logits, batch)[idx])
            target.append_token(out[-1])    # the next draw is for the next position
        return out

    alone = draw(0, True)
    assert alone == draw(5, False) == draw(11, True)
    assert len(set(alone)) > 1     # really sampling, not a constant


def test_different_seeds_differ():
    def run(seed):
        s, sampler = seq(seed=seed, temperature=1.0), Sampler()
        return [sampler(torch.zeros(1, 1000), [s])[0] for _ in range(5)]
    assert run(1) != run(2)
    assert run(1) == run(1)


def test_a_seeded_draw_depends_only_on_seed_and_position():
    """A redone draw (preemption, a retried step) or a draw at a position reached another way picks the same."""
    logits = torch.linspace(-1, 1, 64)[None, :]
    first, again = seq(seed=7, temperature=1.0), seq(seed=7, temperature=1.0)
    sampler = Sampler()
    for _ in range(3):
        sampler(logits, [first])           # draws at the same position: the generator state is not carried
    assert sampler(logits, [first]) == Sampler()(logits, [again])
    picks = set()
    for _ in range(12):
        tok = sampler(logits, [first])[0]
        picks.add(tok)
        first.append_token(tok)
    assert len(picks) > 1
