"""One model's load as the engine reports it (bytes of its weights read, then prepared), and the time left at
the rate measured since the first report: the imports and the tokenizer before it are not counted as weights,
and a cached start that jumps to the end never shows a guess."""
from __future__ import annotations

import time

MIN_SHARE = 0.03      # below this much progress, or this soon after the first report, the rate is not known yet
MIN_SECONDS = 0.5


class LoadProgress:
    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.fraction: float | None = None              # None until the engine's first report
        self.first: tuple[float, float] | None = None   # (time, share) of the first report
        self.last_time: float | None = None

    def report(self, done: int, total: int) -> None:
        """The engine's load_progress callback (called from the loading thread)."""
        now = self.clock()
        self.fraction = min(done / total, 1.0) if total else 1.0
        if self.first is None:
            self.first = (now, self.fraction)
        self.last_time = now

    def seconds_left(self) -> float | None:
        """At the rate of the reports so far, projected from the last one; None while it is not known."""
        if self.fraction is None or self.first is None or self.last_time is None:
            return None
        (t0, f0), f = self.first, self.fraction
        elapsed = self.last_time - t0
        if f - f0 < MIN_SHARE or elapsed < MIN_SECONDS:
            return None
        left = (1.0 - f) * elapsed / (f - f0) - (self.clock() - self.last_time)
        return max(left, 0.0)

    def label(self) -> str:
        """'42% · about 6 s left', '42%', or '' before the weights are reached."""
        if self.fraction is None:
            return ""
        left = self.seconds_left()
        share = f"{self.fraction * 100:.0f}%"
        if left is None:
            return share
        return f"{share} · " + (f"about {left:.0f} s left" if left >= 1 else "almost done")
