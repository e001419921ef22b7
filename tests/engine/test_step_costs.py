"""Step costs (engine/step_costs.py): decode steps' measured seconds by row count, which decide where "auto"
guessing pays on this machine."""
from __future__ import annotations

import pytest

from llmchat.engine.step_costs import TRY_EVERY, StepCosts


def test_costs_are_running_means_and_interpolated_between_measured_row_counts():
    costs = StepCosts()
    costs.record(1, 0.040)
    costs.record(1, 0.050)                       # a running mean: between the two, nearer the first
    assert 0.040 < costs.estimate(1) < 0.045
    costs.record(17, 0.080)
    assert costs.estimate(9) == pytest.approx((costs.estimate(1) + 0.080) / 2)
    assert costs.estimate(40) is None            # beyond every measured count: unknown, never extrapolated
    costs.record(0, 1.0), costs.record(3, 0.0)   # nothing to learn from
    assert set(costs.seconds) == {1, 17}


def test_guessing_pays_where_its_tokens_outrun_its_rows():
    costs = StepCosts()
    assert costs.guessing_pays(1, 16, 4.0) is None          # nothing measured yet
    costs.record(1, 0.040), costs.record(16, 0.060)         # 15 more rows for half a step more
    assert costs.guessing_pays(1, 16, 2.0)                  # 2 tokens in 1.5 steps' time
    assert not costs.guessing_pays(1, 16, 1.5)              # 1.5 tokens in 1.5 steps' time: no gain
    costs.record(80, 0.300)                                 # a crowd: every row costs what a token does
    assert not costs.guessing_pays(16, 80, 40.0)


def test_an_unmeasured_row_count_is_tried_once_in_a_while():
    costs = StepCosts()
    tries = [costs.try_unmeasured() for _ in range(3 * TRY_EVERY)]
    assert sum(tries) == 3 and tries[TRY_EVERY - 1]


def test_guesses_expected_to_hold_follow_the_mean_run_that_held():
    from llmchat.engine.speculation import Guesser
    g = Guesser(held=1.0)
    assert g.expected_accepted(1) == pytest.approx(0.5)     # one guess holds half the time when runs average 1
    assert g.expected_accepted(4) < g.expected_accepted(15) < 1.0
    g.held = 7.0
    assert 5.5 < g.expected_accepted(15) < 7.0               # long guesses: near the mean run, never beyond it
    assert g.expected_accepted(0) == 0.0


def test_a_guess_not_verified_is_scored_by_the_tokens_that_come():
    """A guess the costs did not let run is scored once the plain decode decides it: held guesses raise the
    acceptance (and the guess length) the next decisions use, a miss lowers it; nothing is scored before then."""
    from llmchat.engine.speculation import Guesser
    tokens = [5, 6, 7]
    g = Guesser(held=1.0)
    g.defer(3, [8, 9, 10, 11])
    g.settle(tokens + [8, 9])                    # two of four came, both as guessed: not decided yet
    assert g.deferred is not None and g.held == 1.0
    g.settle(tokens + [8, 9, 10, 11])            # all four held
    assert g.deferred is None and g.held > 1.0 and g.guess_len == 8
    g.defer(7, [1, 2, 3])
    g.defer(7, [4, 4, 4])                        # one at a time: the first stays
    before = g.held
    g.settle(tokens + [8, 9, 10, 11, 1, 7])      # the second guess missed
    assert g.deferred is None and g.held < before and g.guess_len == 2
