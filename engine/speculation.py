"""Draft-free speculative decoding: a decoding sequence guesses its next tokens from its own text (the n-gram
that ends it, looked up earlier in the prompt and reply: "prompt lookup"), and the model scores the guesses
in the same forward pass as the newest token, as a short chunk beside the other sequences' work.

Verification samples each scored row exactly as a plain decode step would sample that position (the same
argmax, or the same seeded draw keyed by seed and position) and keeps the guesses up to the first that differs
from the model's own token, which it emits instead. A row's logits do not depend on the rows beside it (the
determinism guarantee), so the tokens are the ones the model gives without speculation: greedy and seeded
replies are token-identical with it on and off, and unseeded draws keep the model's distribution (each
emitted token is a sample of p given the accepted prefix; a guess is accepted with probability p(guess), the
rule min(1, p/q) for a guess of probability q = 1).

How far to guess follows each sequence's measured acceptance; a sequence whose guesses hold too rarely to pay
stops guessing for a while, so text that never repeats costs (almost) nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MODES = ("auto", "ngram", "off")
NGRAM_SIZES = (3, 2)       # the longest suffix that occurred before wins; 1-grams guess too wildly
START_GUESS = 4
MAX_GUESS = 15             # with the newest token, one 16-row tile of the quantized kernels
PAYING = 0.5               # guesses held per verification (a running mean) below which guessing pauses: a
                           # verification step costs about two plain ones on a quantized model here
PAUSE_STEPS = 16           # decode steps without guessing after that
AUTO_MAX_DECODES = 4       # "auto", until step costs are measured (step_costs.py): guess while at most this many
                           # sequences run or wait (past that a batch was compute-bound on a Zen 4)


class NgramIndex:
    """Where each n-gram of a token list last ended (the index of the token after it), kept up to date as the
    list grows: a lookup is one dict access, an update touches only the new tokens."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.follows: dict[tuple[int, ...], int] = {}
        self._indexed = n      # n-grams ending before this position are in `follows`

    def guess(self, tokens: list[int], k: int) -> list[int]:
        """Up to k tokens that followed the last earlier occurrence of the list's final n-gram."""
        n = self.n
        for end in range(self._indexed, len(tokens)):   # every n-gram but the final one, which is the key
            self.follows[tuple(tokens[end - n:end])] = end
        self._indexed = max(self._indexed, len(tokens))
        if len(tokens) <= n:
            return []
        start = self.follows.get(tuple(tokens[-n:]))
        if start is None:
            return []
        # the text repeats with period len - start: go on repeating it past the end (a run of one token, a loop)
        period = len(tokens) - start
        return [tokens[start + i % period] for i in range(k)]


@dataclass
class Guesser:
    """One sequence's guessing: its n-gram indexes, how far it guesses now, and its counts."""
    guess_len: int = START_GUESS
    held: float = 1.0          # running mean of guesses held per verification
    paused: int = 0
    deferred: tuple[int, list[int]] | None = None   # a guess not verified (Guesser.defer): where, and what
    indexes: list[NgramIndex] = field(default_factory=lambda: [NgramIndex(n) for n in NGRAM_SIZES])

    def propose(self, tokens: list[int], room: int) -> list[int]:
        """This step's guesses (at most `room`), or none while paused."""
        return self.lookup(tokens, self.length(room))

    def length(self, room: int) -> int:
        """How many tokens to guess this step (at most `room`): 0 while paused (one step of the pause goes)."""
        if self.paused:
            self.paused -= 1
            return 0
        return max(0, min(self.guess_len, room))

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        """Up to k tokens from the longest n-gram of the text that ends it and occurred before."""
        if k <= 0:
            return []
        for index in self.indexes:
            draft = index.guess(tokens, k)
            if draft:
                return draft
        return []

    def observe(self, guessed: int, accepted: int) -> None:
        """Adapt to one verification: guess further after full success, shorter after a miss, and pause while
        guesses hold too rarely to pay for their steps."""
        if accepted == guessed:
            self.guess_len = min(MAX_GUESS, self.guess_len * 2)
        else:
            self.guess_len = max(1, accepted + 1)
        self.held += 0.3 * (accepted - self.held)
        if self.held < PAYING:
            self.paused, self.held, self.guess_len = PAUSE_STEPS, 1.0, START_GUESS

    def expected_accepted(self, k: int) -> float:
        """Guesses of k expected to hold, taking each to hold with the chance p that makes the mean run held
        (p / (1 - p) = held) as long as the ones before it did."""
        p = self.held / (1.0 + self.held)
        return p * (1.0 - p ** k) / (1.0 - p)

    def defer(self, at: int, draft: list[int]) -> None:
        """This step's guesses, for position `at` on, were not worth verifying here (llm_engine's measured step
        costs): they are scored later against the tokens that come instead, so the acceptance that decides the
        next steps stays measured while none is verified."""
        if self.deferred is None:
            self.deferred = (at, draft)

    def settle(self, tokens: list[int]) -> None:
        """Score a deferred guess against the sequence's tokens once they decide it (a miss, or all of it came)."""
        if self.deferred is None:
            return
        at, draft = self.deferred
        came = tokens[at:at + len(draft)]
        held = 0
        while held < len(came) and came[held] == draft[held]:
            held += 1
        if held < len(came) or len(came) == len(draft):
            self.deferred = None
            self.observe(len(draft), held)


def accepted_run(draft: list[int], sampled: list[int]) -> list[int]:
    """The tokens a verification emits: the guesses the model agreed with, then its own token where it first
    disagreed (or after the last guess). sampled[j] is the model's token at the position of draft[j]."""
    for j, guess in enumerate(draft):
        if sampled[j] != guess:
            return draft[:j] + [sampled[j]]
    return draft + [sampled[len(draft)]]


class RowView:
    """A sequence as it would stand after the first `ahead` guesses: what the sampler reads of a row (params,
    seeded generator, position, tokens for penalties), so a guessed row is sampled as that position would be.
    A constrained sequence's rows share its matcher: the masks follow the guesses (grammar.GrammarMasks)."""

    def __init__(self, seq, draft: list[int], ahead: int) -> None:
        self.seq = seq
        self.matcher = seq.matcher
        self.ahead = ahead
        self.row_guesses = draft if ahead == 0 else []   # the guesses whose rows follow this one
        self.params = seq.params
        self.generator = seq.generator
        self.request_id = seq.request_id
        self.token_ids = seq.token_ids + draft[:ahead]
        self.num_tokens = len(self.token_ids)
        self.output_token_ids = self.token_ids[seq.num_prompt_tokens:]


def row_views(chunk) -> list:
    """What the sampler reads for each logits row of a sampling chunk: the sequence itself for a plain decode
    or prefill end; for a chunk with guesses, the sequence as it would stand at each guessed position."""
    if not chunk.draft:
        return [chunk.seq]
    return [RowView(chunk.seq, chunk.draft, ahead) for ahead in range(len(chunk.draft) + 1)]


def sampled_rows(chunks) -> list[int]:
    """Indices, among the step's logits rows (ModelRunner.execute), of the rows that sample."""
    rows, at = [], 0
    for c in chunks:
        n = 1 + len(c.draft)
        if c.samples:
            rows.extend(range(at, at + n))
        at += n
    return rows
