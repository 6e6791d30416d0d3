"""With no reference in use the dashboard says what the clock does and that the integrity checks have nothing to
check (it said "none (holdover)" while FREERUN, and "reference used, all checks ok" with the receiver off)."""

from __future__ import annotations

import copy

from tests.web.conftest import ConsoleEnv


def test_no_reference_free_running_and_integrity_with_nothing_to_check(env: ConsoleEnv) -> None:
    status = copy.deepcopy(env.status)
    status["clock"]["state"] = "FREERUN"
    refs = status["references"]
    refs["active"] = None
    for row in refs["rows"]:
        if row["name"] == "gnss":
            row.update(active=False, state="no-signal", reason="no sample for 72 s")
    status["integrity"] = dict(status["integrity"], level="ok", usable=True, reasons=[], override="auto")
    env.status = status  # this test's own: the status is shared by the session's tests
    page = env.login("viewer").client.get("/").get_data(as_text=True)
    assert "active: none (freerun)" in page and "none (holdover)" not in page
    assert "reference not in use (no-signal)" in page and "no data to check" in page
    assert "reference used" not in page
    assert 'class="state integrity-unknown">no data</div>' in page  # not a green "ok" with nothing checked

    from appliance.status import render

    text = render(status)
    assert "Integrity       : no data to check (reference not in use: no-signal)" in text
