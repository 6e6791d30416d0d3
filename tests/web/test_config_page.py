"""The configuration page as served (no browser): sections, widgets by type, markers, roles, the form without JavaScript."""

from __future__ import annotations

import re

from appliance import config as cfg
from appliance.web.settings_edit import load_overrides
from tests.web.conftest import ConsoleEnv


def _row_html(page: str, name: str) -> str:
    start = page.index(f'id="setting-{name.replace(".", "-")}"')
    return page[start:page.index("</tr>", start)]


def test_the_page_has_a_section_per_group_and_a_widget_per_type(env: ConsoleEnv) -> None:
    page = env.login("admin").client.get("/config").get_data(as_text=True)
    groups = {s.name.split(".", 1)[0] if "." in s.name else "general" for s in cfg.SETTINGS}
    assert set(re.findall(r'<section class="config-section" id="section-([a-z_]+)"', page)) == groups
    assert '<select name="value" aria-label="log.level">' in _row_html(page, "log.level")
    assert 'type="checkbox" name="value" value="true"' in _row_html(page, "ntp.enabled")
    age = _row_html(page, "gnss.label_max_age_ms")
    assert 'type="number" value="900" step="1" min="100" max="990"' in age and '<span class="unit">ms</span>' in age
    assert 'placeholder="comma-separated"' in _row_html(page, "ntp.allow")
    assert 'type="password" value=""' in _row_html(page, "snmp.community")
    start_only = _row_html(page, "gnss.device")
    assert 'name="value"' not in start_only and "Set in the configuration file or with --set" in start_only
    assert 'id="restart-list" class="restart-list" aria-live="polite" hidden' in page
    assert "config.js" in page and "Only admins may change settings." not in page


def test_a_viewer_gets_the_page_with_every_field_disabled_and_no_form_to_post(env: ConsoleEnv) -> None:
    page = env.login("viewer").client.get("/config").get_data(as_text=True)
    assert "Only admins may change settings." in page
    assert 'name="value"' not in page and 'name="csrf_token" value' not in page.split('id="config"')[1]
    assert 'class="save"' not in page and "use default" not in page
    assert "disabled" in _row_html(page, "log.level") and "disabled" in _row_html(page, "ntp.enabled")


def test_without_javascript_a_checkbox_posts_and_the_answer_returns_to_the_setting(env: ConsoleEnv) -> None:
    admin = env.login("admin")
    ticked = admin.form("/config", {"name": "ptp.path_trace", "value": ["false", "true"]})  # type: ignore[dict-item]
    assert ticked.status_code == 302 and ticked.headers["Location"].endswith("/config#setting-ptp-path_trace")
    assert load_overrides(env.state_dir) == {"ptp.path_trace": True}
    page = admin.client.get("/config").get_data(as_text=True)
    trace = _row_html(page, "ptp.path_trace")
    assert "setting changed waiting" in trace and " checked" in trace and "running: <code>false</code>" in trace
    assert re.search(r'<li data-name="ptp.path_trace">.*running <code>false</code> → saved <code>true</code>', page)
    cleared = admin.form("/config", {"name": "ptp.path_trace", "value": "false"})
    assert cleared.status_code == 302 and load_overrides(env.state_dir) == {"ptp.path_trace": False}
    page = admin.client.get("/config").get_data(as_text=True)
    assert 'id="restart-list" class="restart-list" aria-live="polite" hidden' in page  # back to what it runs with
    assert "setting changed" not in _row_html(page, "ptp.path_trace")
