"""What a decode step costs on this machine, by its row count, measured as the engine runs: speculation's "auto"
guesses where the rows a verification adds cost less than the tokens they are expected to bring.

The price of a row differs from machine to machine and with the batch: one session's decode reads every weight
for one row, so a few more rows cost little; a Xeon's AMX tiles take 16 rows for about the price of 5-7 on its
vector dots; sixteen sessions already fill the compute units, where each extra row costs what a token does. A
fixed rule (guess while at most N sequences decode) is wrong somewhere; the measured cost is not.
"""
from __future__ import annotations

SMOOTHING = 0.2        # weight of a new step's time in its row count's running mean
MARGIN = 1.05          # guesses must bring this much more than they cost: noise never tips a step into a loss
TRY_EVERY = 64         # decisions between tries of a row count not measured yet: at most one costlier step in 64


class StepCosts:
    def __init__(self) -> None:
        self.seconds: dict[int, float] = {}   # rows -> running mean of a decode-only step's seconds
        self.untried = 0                      # decisions since the last try of an unmeasured row count

    def record(self, rows: int, seconds: float) -> None:
        """A step that only decoded (with its guesses) ran `rows` rows in `seconds`."""
        if rows <= 0 or seconds <= 0:
            return
        old = self.seconds.get(rows)
        self.seconds[rows] = seconds if old is None else old + SMOOTHING * (seconds - old)

    def estimate(self, rows: int) -> float | None:
        """Seconds of a step of `rows` rows: measured, or between the nearest measured counts on either side;
        None outside them."""
        if rows in self.seconds:
            return self.seconds[rows]
        below = max((r for r in self.seconds if r < rows), default=None)
        above = min((r for r in self.seconds if r > rows), default=None)
        if below is None or above is None:
            return None
        t0, t1 = self.seconds[below], self.seconds[above]
        return t0 + (t1 - t0) * (rows - below) / (above - below)

    def guessing_pays(self, plain_rows: int, guessed_rows: int, expected_tokens: float) -> bool | None:
        """Whether a step of guessed_rows rows emitting expected_tokens beats the plain step (plain_rows rows, as
        many tokens) in tokens a second; None while either cost is unknown."""
        plain, guessed = self.estimate(plain_rows), self.estimate(guessed_rows)
        if plain is None or guessed is None:
            return None
        return expected_tokens / guessed > MARGIN * plain_rows / plain

    def try_unmeasured(self) -> bool:
        """True once every TRY_EVERY calls: time to measure a row count the fixed rule would not run."""
        self.untried += 1
        if self.untried >= TRY_EVERY:
            self.untried = 0
            return True
        return False
