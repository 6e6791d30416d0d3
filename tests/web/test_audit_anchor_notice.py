"""The dashboard says, as a standing notice and not an alarm, when the audit chain is not anchored off the box."""

from __future__ import annotations

from appliance.audit.service import NOT_ANCHORED
from tests.web.conftest import ConsoleEnv


def _dashboard(env: ConsoleEnv, anchor: dict[str, object]) -> str:
    outputs = dict(env.status["outputs"], audit=dict(env.status["outputs"].get("audit") or {}, anchor=anchor))
    env.status = {**env.status, "outputs": outputs}  # this test's own: the status is shared by the session's tests
    viewer = env.login("viewer")
    page = viewer.client.get("/")
    assert page.status_code == 200
    return page.get_data(as_text=True)


def test_the_dashboard_shows_the_notice_while_no_collector_is_configured(env: ConsoleEnv) -> None:
    page = _dashboard(env, {"anchored": False, "notice": NOT_ANCHORED})
    assert 'id="audit-anchor-notice"' in page and "not anchored off the box" in page
    assert "audit-anchor" not in " ".join(a["id"] for a in env.status.get("alarms", []) if isinstance(a, dict))


def test_no_notice_once_a_collector_holds_the_chain(env: ConsoleEnv) -> None:
    page = _dashboard(env, {"anchored": True, "notice": ""})
    assert 'id="audit-anchor-notice"' not in page
