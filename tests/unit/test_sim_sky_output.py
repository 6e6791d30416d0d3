"""The simulated receiver's output as the appliance's own parser reads it: over days of sky, no sentence it writes
is rejected (an azimuth of 359.5 once rounded to 360, out of NMEA's 000-359, and a pty test saw it as bad-field)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import leap
from appliance.gnss import nmea
from appliance.gnss.framer import Framer, NmeaFrame
from appliance.sim.receiver import SimReceiver
from appliance.sim.sky import Sky

TABLE = leap.LeapTable.load_default()
START_TAI_NS = 1_830_000_000 * 1_000_000_000


@given(st.integers(0, 50), st.integers(0, 30 * 86400))
@settings(max_examples=300, deadline=None)
def test_every_satellite_is_within_the_ranges_nmea_allows(seed: int, second: int) -> None:
    for sat in Sky(seed).view(START_TAI_NS + second * 1_000_000_000):
        assert 0 <= sat.azimuth_deg <= 359 and 0 <= sat.elevation_deg <= 90


def test_a_thousand_bursts_parse_without_a_rejection() -> None:
    receiver, framer = SimReceiver(7, TABLE), Framer()
    rejected = []
    for i in range(1000):
        for frame in framer.feed(receiver.burst(START_TAI_NS + i * 257 * 1_000_000_000)):
            decoded = nmea.decode(frame.text) if isinstance(frame, NmeaFrame) else frame
            if type(decoded).__name__ == "Rejected":
                rejected.append(decoded)
    assert rejected == []
