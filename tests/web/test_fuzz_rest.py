"""Fuzzing the REST API's inputs (``appliance/web/api.py``): every JSON body and every query string, through the real
console application (``tests/web/conftest.py``: ``create_app`` around a recorded status, real stores on files).

Bodies: any JSON value (null, booleans, integers past 64 bits, finite floats, text; lists and objects, sometimes
nested past the 32-level limit), bodies shaped as each route expects with values of any type, bytes that are not
JSON sent as application/json, and bodies past the 64 KiB limit; to PUT /api/v1/config/<name> (a real setting's name
or any text), POST /api/v1/holdover, /references and /integrity.  Query strings: the routes' own parameters
(``since``, ``until``, ``limit``, ``before_seq``, ``kind``, ``q``, ``max_points``) with integers of any size, text
and numbers that are not integers, other names, and raw bytes; to GET /api/v1/audit, /audit/export, /quality,
/quality.csv, /stability.

Contract, for each request: never a 5xx; a status in the set the API answers (200, 400, 403, 404, 409, 413); every
answer with status >= 400 is a JSON object whose ``error`` is a string; a refused request saves no setting (the
settings file is as it was), one the console refuses (400, 403, 404, 413) hands no command to the appliance, and a
command the appliance refuses is a 409 with its reason; afterwards GET /api/v1/status still answers 200.  An admin
(with a session and its CSRF token, without the token, or with an API token) reaches every route; a viewer is
refused every write whatever the body (403; 400 for a body nested too deeply, 413 for one too large, 404 for a path
that routes nowhere, all refused before the role is looked at), and nothing is saved or handed to the appliance.
Budget: ``tests/props/fuzzing.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from appliance.settings import SETTINGS
from appliance.web.app import MAX_JSON_DEPTH
from appliance.web.api import HOLDOVER_ACTIONS, INTEGRITY_ACTIONS, REFERENCE_ACTIONS
from tests.props.fuzzing import fuzz, mutated
from tests.web.conftest import BASE, ConsoleEnv

# What the API answers a logged-in user (401 without a session or token); 404: an /api/ path that routes nowhere (a
# setting name that is empty or holds a slash)
STATUSES = {200, 400, 403, 404, 409, 413}
MAX_BODY = 64 * 1024

# --- bodies --------------------------------------------------------------------------------------------------------
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-(2**70), 2**70), st.sampled_from(
    [2**63, -(2**63) - 1, 10**400]), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=20)


def nested(depth: int, opener: str, inner: Any) -> Any:
    for _ in range(depth):
        inner = [inner] if opener == "[" else {"value": inner}
    return inner


deep_values = st.builds(nested, st.integers(MAX_JSON_DEPTH - 4, 45), st.sampled_from(["[", "{"]), scalars)
any_value = st.one_of(json_values, deep_values)
ACTIONS = {"holdover": HOLDOVER_ACTIONS, "integrity": INTEGRITY_ACTIONS, "references": REFERENCE_ACTIONS}


def actions(route: str) -> st.SearchStrategy[Any]:
    """The route's own actions half the time, another route's, any text or any value the rest."""
    return st.one_of(st.sampled_from(ACTIONS[route]), st.sampled_from(ACTIONS[route]),
                     st.sampled_from(sorted({a for names in ACTIONS.values() for a in names}) + ["START", "pin "]),
                     st.text(max_size=10), json_values)


@st.composite
def settings_values(draw: st.DrawFn) -> tuple[str, Any]:
    """A setting's name (a real one, one close to it, or any text) and a value: its default, its default as text,
    or anything."""
    setting = draw(st.sampled_from(SETTINGS))
    name = draw(st.sampled_from([setting.name, setting.name, setting.name.upper(), setting.name + "x",
                                 setting.name.split(".")[-1]]) | st.text(max_size=20))
    default = list(setting.default) if isinstance(setting.default, tuple) else setting.default
    value = draw(st.sampled_from([default, str(default)]) | any_value)
    return name, value


def encoded(value: Any) -> bytes:
    return json.dumps(value).encode()


@st.composite
def bodies(draw: st.DrawFn, route: str) -> bytes:
    """A JSON body for ``route`` (a write route): shaped as it expects, with any values; any JSON; not JSON; or past
    the size limit."""
    shaped: st.SearchStrategy[Any]
    if route == "config":
        shaped = st.builds(lambda v: {"value": v}, settings_values().map(lambda nv: nv[1]))
    elif route == "references":
        shaped = st.fixed_dictionaries({"action": actions(route)}, optional={
            "name": st.sampled_from(["gnss", "ptp", "ntp", "", "x" * 33]) | any_value, "extra": any_value})
    else:
        shaped = st.fixed_dictionaries({"action": actions(route)}, optional={"extra": any_value})
    return draw(st.one_of(
        shaped.map(encoded), shaped.map(encoded), any_value.map(encoded), mutated(shaped.map(encoded)),
        st.binary(max_size=80),
        st.sampled_from([b"", b"null", b"{", b"[" * 40 + b"]" * 40, b'{"value": NaN}', b'{"action": Infinity}',
                         b'{"value": 1e999}', b'"\\ud800"', b'{"value": "\\ud800"}', b"\xff\xfe{}", b"9" * 5000,
                         b'{"value": ' + b"9" * 5000 + b"}"]),
        shaped.map(encoded).flatmap(lambda body: st.integers(MAX_BODY - len(body) - 2, MAX_BODY + 100).map(
            lambda pad: body + b" " * max(0, pad))),  # around the 64 KiB limit
    ))


# --- query strings -------------------------------------------------------------------------------------------------
PARAMETERS = ["since", "until", "limit", "before_seq", "kind", "q", "max_points"]
INT64 = 2**63
big = st.sampled_from([INT64 - 1, INT64, -INT64, -INT64 - 1, 10**30, -(10**30), 10**10, 10**10 - 1, -(10**10)]) \
    | st.integers(-(2**70), 2**70)
numbers = st.one_of(big.map(str), st.integers(-10**6, 10**6).map(str),
                    st.sampled_from(["", "-3600", "0", "1e3", "1.5", " 12 ", "+5", "0x10", "\u0661", "9" * 5000,
                                     "NaN", "-0", "1_000"]))
query_values = numbers | st.text(max_size=20)


@st.composite
def instants(draw: st.DrawFn) -> list[tuple[str, str]]:
    """``since`` and ``until``: either, both or neither, relative seconds or absolute ns of any size; half the time
    ``until`` a little after ``since``, so that the range is valid wherever it is."""
    since = draw(big | st.integers(-10**6, 10**6))
    until = since + draw(st.integers(-2, 10**6)) if draw(st.booleans()) else draw(big | st.integers(-10**6, 10**6))
    keep = draw(st.sampled_from([("since", "until"), ("since", "until"), ("since",), ("until",), ()]))
    return [(k, str({"since": since, "until": until}[k])) for k in keep]


@st.composite
def queries(draw: st.DrawFn) -> str:
    """The routes' own parameters with values of any kind; sometimes other names, or a name twice."""
    pairs = draw(instants()) + list(draw(st.dictionaries(
        st.sampled_from(["limit", "before_seq", "kind", "q", "max_points"]), big.map(str) | query_values,
        max_size=3)).items())
    if draw(st.integers(0, 3)) == 0:
        pairs += draw(st.lists(st.tuples(st.sampled_from(PARAMETERS) | st.text(max_size=8), query_values),
                               min_size=1, max_size=2))
    return urlencode(pairs)


query_strings = st.one_of(
    queries(),
    queries().map(lambda q: q.encode()).flatmap(lambda q: mutated(q, max_edits=2)).map(lambda raw: raw.decode(
        "latin-1")),
    st.binary(max_size=60).map(lambda raw: raw.decode("latin-1")),  # as a WSGI server hands QUERY_STRING on
    st.text(max_size=60),
)
READ_ROUTES = ["/api/v1/audit", "/api/v1/audit/export", "/api/v1/quality", "/api/v1/quality.csv", "/api/v1/stability"]
WRITE_ROUTES = ["config", "holdover", "references", "integrity"]


@st.composite
def writes(draw: st.DrawFn) -> tuple[str, str, bytes]:
    """(method, path, body) of a write route."""
    route = draw(st.sampled_from(WRITE_ROUTES))
    if route == "config":
        name = draw(settings_values().map(lambda nv: nv[0]))
        return "PUT", "/api/v1/config/" + quote(name, safe=""), draw(bodies(route))
    return "POST", f"/api/v1/{route}", draw(bodies(route))


# --- the checks ----------------------------------------------------------------------------------------------------
class Session:
    """One user's way in: a logged-in browser's session with its CSRF token, or an API token."""

    def __init__(self, env: ConsoleEnv, user: str):
        self.env = env
        self.browser = env.login(user)
        self.csrf = self.browser.csrf()
        self.token = env.token(user)

    def send(self, method: str, path: str, body: bytes | None = None, query: str = "",
             via: str = "session") -> Any:
        headers = {"Referer": f"{BASE}/"}
        if via == "token":
            headers["Authorization"] = f"Bearer {self.token}"
        elif via == "session":
            headers["X-CSRFToken"] = self.csrf
        return self.browser.client.open(path, method=method, data=body, query_string=query, headers=headers,
                                        content_type="application/json" if body is not None else None)


def saved(env: ConsoleEnv) -> bytes | None:
    return env.overrides.read_bytes() if env.overrides.exists() else None


def check_answer(response: Any, what: str) -> str:
    """Check one answer to the contract; a label for it (for ``event``)."""
    status = response.status_code
    assert status < 500, f"{what}: {status} {response.get_data(as_text=True)[:300]}"
    if status >= 400:
        assert response.mimetype == "application/json", f"{what}: {status} {response.mimetype}"
        answer = response.get_json(silent=True)
        assert isinstance(answer, dict) and isinstance(answer.get("error"), str), f"{what}: {status} {answer!r:.300}"
    assert status in STATUSES, f"{what}: {status} {response.get_data(as_text=True)[:300]}"
    return f"{status}: {answer['error'][:30]}" if status >= 400 else f"{status}"


def still_serving(session: Session) -> None:
    assert session.send("GET", "/api/v1/status", via="token").status_code == 200


def run(env: ConsoleEnv, strategy: st.SearchStrategy[Any], scale: float, body: Callable[[Any], None]) -> None:
    @fuzz(scale)
    @given(strategy)
    def one(case: Any) -> None:
        body(case)

    one()


# --- the tests -----------------------------------------------------------------------------------------------------
def test_every_write_body_gets_a_json_answer_and_a_refused_change_saves_nothing(env: ConsoleEnv) -> None:
    admin = Session(env, "admin")

    def write(case: tuple[tuple[str, str, bytes], str, str | None]) -> None:
        (method, path, data), via, env.refusal = case
        before, commands = saved(env), len(env.commands)
        response = admin.send(method, path, data, via=via)
        what = f"{method} {path} {data[:200]!r} via {via}"
        event(f"{path.split('/')[3]} via {via}: {check_answer(response, what)}")
        if response.status_code != 200:  # refused: nothing saved
            assert saved(env) == before, what
        if response.status_code not in (200, 409):  # refused by the console: nothing handed to the appliance
            assert len(env.commands) == commands, what
        if len(env.commands) > commands and env.refusal is not None:  # the appliance refused: a 409 saying why
            assert response.status_code == 409 and response.get_json()["error"] == env.refusal, what
        still_serving(admin)

    run(env, st.tuples(writes(), st.sampled_from(["session", "session", "token", "session without csrf"]),
                       st.sampled_from([None, None, "the fake appliance refuses"])), 1.0, write)


def test_every_query_string_gets_a_json_answer(env: ConsoleEnv) -> None:
    admin = Session(env, "admin")

    def read(case: tuple[str, str]) -> None:
        path, query = case
        response = admin.send("GET", path, query=query, via="token")
        event(f"{path}: {check_answer(response, f'GET {path}?{query[:300]!r}')}")
        still_serving(admin)

    run(env, st.tuples(st.sampled_from(READ_ROUTES), query_strings), 1.0, read)


def test_a_viewer_is_refused_every_write_whatever_the_body(env: ConsoleEnv) -> None:
    viewer = Session(env, "viewer")

    def write(case: tuple[tuple[str, str, bytes], str]) -> None:
        (method, path, data), via = case
        before, commands = saved(env), len(env.commands)
        response = viewer.send(method, path, data, via=via)
        what = f"{method} {path} {data[:200]!r} via {via}"
        event(f"viewer: {check_answer(response, what)}")
        assert response.status_code in (400, 403, 404, 413), what  # 404: a setting name that routes nowhere
        if response.status_code == 400:  # refused before the role is checked: nested too deeply
            assert response.get_json()["error"].startswith("refused: the JSON body nests deeper"), what
        assert saved(env) == before and len(env.commands) == commands, what
        still_serving(viewer)

    run(env, st.tuples(writes(), st.sampled_from(["session", "token"])), 0.3, write)


# --- what the fuzz tests found ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("path, query", [
    ("/api/v1/audit", f"before_seq={2**63}"),
    ("/api/v1/quality", f"since={2**63 - 1}&until={2**63}"),
    ("/api/v1/quality.csv", f"since={2**63 - 1}&until={2**63}"),
    ("/api/v1/stability", f"since={2**63 - 1}&until={2**63}"),
    ("/api/v1/quality", f"since={-(2**63) + 2}&until={-(2**63) + 10}"),  # in 64 bits; the look-back before it is not
])
def test_an_instant_or_sequence_number_past_64_bits_is_answered_not_a_500(env: ConsoleEnv, path: str,
                                                                           query: str) -> None:
    """Found by the query fuzz test above: the number reaches SQLite, whose OverflowError ("Python int too large to
    convert to SQLite INTEGER") is a 500 with a traceback in the log (AuditStore.records for before_seq,
    TimeQualityLog.query for since and until)."""
    response = Session(env, "admin").send("GET", path, query=query, via="token")
    check_answer(response, f"GET {path}?{query}")


@pytest.mark.parametrize("name", ["", "a/b"])
def test_a_setting_name_that_routes_nowhere_is_answered_in_json(env: ConsoleEnv, name: str) -> None:
    """Found by the write fuzz test above: PUT /api/v1/config/ with no name, or a name holding a slash (%2F), routes
    nowhere, and Flask's own 404 page (HTML) answers, where every other refusal under /api/ is a JSON error."""
    response = Session(env, "admin").send("PUT", "/api/v1/config/" + quote(name, safe=""), b'{"value": 1}',
                                          via="token")
    assert response.status_code == 404
    check_answer(response, f"PUT /api/v1/config/{name}")
