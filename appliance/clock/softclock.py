"""A software-disciplined clock: served time as a piecewise-linear function of a free-running counter.

Pure core.  The counter is the simulated oscillator (simulation) or the host's own clock left alone (the "software"
backend).  Each frequency change starts a new segment anchored where the previous one ended, so the served time never
jumps unless ``step`` is called.  Anchors keep whole nanoseconds as integers and carry the fraction separately: a
servo re-anchors every second with corrections well below a nanosecond, and rounding each one away would silently
drop the frequency correction altogether.
"""

from __future__ import annotations

import math


class SoftClock:
    def __init__(self, start_raw_ns: int, start_served_ns: int, freq_ppb: float = 0.0):
        self._anchor_raw_ns = start_raw_ns
        self._anchor_served_ns = start_served_ns
        self._anchor_frac_ns = 0.0  # the served anchor's fraction of a nanosecond, in [0, 1)
        self.freq_ppb = freq_ppb
        self.steps = 0

    def served_ns(self, raw_ns: int) -> int:
        """The served time when the counter reads ``raw_ns`` (valid for any raw, before or after the anchor)."""
        whole, frac = self._exact(raw_ns)
        return whole + round(frac)

    def raw_ns_at(self, served_ns: int) -> int:
        """The counter reading at which the served clock reads ``served_ns`` on the current segment (the inverse of
        ``served_ns``, to within a nanosecond): where an output edge for a served instant belongs."""
        return self._anchor_raw_ns + round((served_ns - self._anchor_served_ns - self._anchor_frac_ns)
                                           / (1 + self.freq_ppb * 1e-9))

    def set_frequency(self, freq_ppb: float, at_raw_ns: int) -> None:
        """From ``at_raw_ns`` on, the served clock runs at (1 + freq_ppb * 1e-9) times the counter's rate."""
        self._reanchor(at_raw_ns, 0)
        self.freq_ppb = freq_ppb

    def step(self, delta_ns: int, at_raw_ns: int) -> None:
        self._reanchor(at_raw_ns, delta_ns)
        self.steps += 1

    def _exact(self, raw_ns: int) -> tuple[int, float]:
        elapsed = raw_ns - self._anchor_raw_ns
        return self._anchor_served_ns + elapsed, self._anchor_frac_ns + elapsed * self.freq_ppb * 1e-9

    def _reanchor(self, at_raw_ns: int, delta_ns: int) -> None:
        whole, frac = self._exact(at_raw_ns)
        carry = math.floor(frac)
        self._anchor_served_ns = whole + carry + delta_ns
        self._anchor_frac_ns = frac - carry
        self._anchor_raw_ns = at_raw_ns
