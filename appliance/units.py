"""Time units: the one place the number of nanoseconds in a second is written down.

Pure core.  Instants and durations are int nanoseconds throughout (ARCHITECTURE.md, "Time"); these constants convert
at the edges of that rule: settings in ms or s, rates per second, days of holdover.
"""

from __future__ import annotations

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
PS_PER_NS = 1_000
S_PER_DAY = 86_400
NS_PER_DAY = S_PER_DAY * NS_PER_S
