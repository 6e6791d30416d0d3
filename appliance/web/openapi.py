"""The OpenAPI 3.1 document of the REST API (served at /api/v1/openapi.json).

Pure: one function building a dict.  Kept beside the views it describes; a test checks that every API route is in
it and that it validates against the OpenAPI schema.
"""

from __future__ import annotations

from typing import Any

from appliance import __version__

_JSON = {"application/json": {"schema": {"type": "object"}}}
_RANGE = [{"name": "since", "in": "query", "schema": {"type": "integer"},
           "description": "seconds relative to now (e.g. -3600) or absolute TAI ns; default: an hour ago"},
          {"name": "until", "in": "query", "schema": {"type": "integer"},
           "description": "seconds relative to now or absolute TAI ns; default: now"}]
_ERRORS = {"400": {"description": "bad request", "content": _JSON},
           "401": {"description": "no valid session or token", "content": _JSON},
           "403": {"description": "the user's role does not allow it", "content": _JSON},
           "429": {"description": "too many requests from this address", "content": _JSON}}
_REASON = {"reason": {"type": "string", "maxLength": 200,
                      "description": "why the operator does it: goes into the audit record"}}
_REFUSED = {"409": {"description": "the appliance refused the command (the reply's error says why)", "content": _JSON}}


def _op(summary: str, role: str = "viewer", params: list[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None, content: dict[str, Any] | None = None,
        responses: dict[str, Any] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "description": f"Needs the {role} role.",
                          "responses": {"200": {"description": "OK", "content": content or _JSON}, **_ERRORS,
                                        **(responses or {})}}
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return op


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Time server appliance API", "version": __version__,
                 "description": "Status, satellites, alarms, audit, configuration and time quality of the appliance. "
                                "Instants are TAI nanoseconds since 1970-01-01 unless a field says utc."},
        "servers": [{"url": "/api/v1"}],
        "components": {"securitySchemes": {
            "token": {"type": "http", "scheme": "bearer", "description": "an API token made by an admin"},
            "session": {"type": "apiKey", "in": "cookie", "name": "appliance_session",
                        "description": "the console's session; writes also need the X-CSRFToken header"}}},
        "security": [{"token": []}, {"session": []}],
        "paths": {
            "/status": {"get": _op("The appliance's status: clock, receiver, every GNSS receiver (receivers), GNSS "
                                   "integrity, leap, outputs, alarms, the sync monitor's downstream clients (monitor)")},
            "/satellites": {"get": _op("Satellites in view with azimuth, elevation, C/N0 and use, and their "
                                       "tracks (recent azimuth and elevation)")},
            "/alarms": {"get": _op(
                "Active alarms (stable ID, X.733 severity, probable cause, what to do, since when, acknowledgement), "
                "the history pairing each raise with its clear (newest first), and the alarm catalogue",
                params=[{"name": "severity", "in": "query",
                         "schema": {"enum": ["critical", "major", "minor", "warning", "info"]}},
                        {"name": "code", "in": "query", "schema": {"type": "string"}, "description": "an alarm code"},
                        {"name": "state", "in": "query", "schema": {"enum": ["open", "cleared"]}},
                        {"name": "q", "in": "query", "schema": {"type": "string"},
                         "description": "words in the code, title or text"}])},
            "/alarms/{code}/ack": {"post": {**_op("Acknowledge an active alarm (audited, with who and when); it stays "
                                                  "active until its condition clears", role="operator",
                                                  body={"type": "object",
                                                        "properties": {"comment": {"type": "string",
                                                                                   "maxLength": 200}}},
                                                  responses=_REFUSED),
                                            "parameters": [{"name": "code", "in": "path", "required": True,
                                                            "schema": {"type": "string"}}]}},
            "/audit": {"get": _op("Audit records, newest first", params=[
                {"name": "q", "in": "query", "schema": {"type": "string"}, "description": "text to search for"},
                {"name": "kind", "in": "query", "schema": {"type": "string"}, "description": "kinds, comma-separated"},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                {"name": "before_seq", "in": "query", "schema": {"type": "integer"}}])},
            "/audit/verify": {"get": _op(
                "Check the audit chain and its head file (incremental; shared by every client: at most one check per "
                "10 s, the last result with fresh=false and age_s in between); names the first broken record",
                responses={"429": {"description": "the first check is still running (see Retry-After)",
                                   "content": _JSON}})},
            "/audit/export": {"get": _op("A signed bundle of the audit records in a range (all by default)",
                                         role="operator", params=_RANGE)},
            "/config": {"get": _op("Every setting: value, default, unit, bounds, choices, whether it differs from "
                                   "its default and whether a change needs a restart (pending_restart once saved)")},
            "/config/{name}": {"put": {**_op("Change one setting (validated as on the command line; audited)",
                                             role="admin", body={"type": "object", "required": ["value"],
                                                                 "properties": {"value": {}}}),
                                       "parameters": [{"name": "name", "in": "path", "required": True,
                                                       "schema": {"type": "string"}}]}},
            "/backup": {"post": _op("A signed configuration backup archive (as `appliance backup` writes it): settings, "
                                    "console users and API tokens, SNMPv3 users, PTP security associations, and with "
                                    "keys the private keys encrypted under the passphrase (12+ characters); audited",
                                    role="admin",
                                    body={"type": "object", "properties": {"keys": {"type": "boolean"},
                                                                           "passphrase": {"type": "string"}}})},
            "/holdover": {"post": _op("Force holdover or release it (audited)", role="operator",
                                      body={"type": "object", "required": ["action"],
                                            "properties": {"action": {"enum": ["start", "stop"]}, **_REASON}},
                                      responses=_REFUSED)},
            "/references": {
                "get": _op("The time references: the active one, the selection policy, and per reference its state, "
                           "priority, offset against the clock, jitter and accuracy"),
                "post": _op("Pin the clock to a reference (or unpin: automatic selection), or enable or disable one; "
                            "audited", role="operator",
                            body={"type": "object", "required": ["action"],
                                  "properties": {"action": {"enum": ["pin", "unpin", "enable", "disable"]},
                                                 "name": {"type": "string"}, **_REASON}},
                            responses=_REFUSED)},
            "/integrity": {"post": _op("Override the GNSS integrity verdict (trust: use the reference whatever the "
                                       "checks say; reject: hold over; auto: the checks decide) or survey the "
                                       "antenna's position again (resurvey); audited. The verdict itself is the "
                                       "status's integrity", role="operator",
                                       body={"type": "object", "required": ["action"],
                                             "properties": {"action": {"enum": ["trust", "reject", "auto",
                                                                                "resurvey"]}, **_REASON}},
                                       content={"application/json": {"schema": {
                                           "type": "object", "required": ["ok"],
                                           "properties": {"ok": {"type": "boolean"},
                                                          "override": {"enum": ["auto", "trust", "reject"]},
                                                          "usable": {"type": "boolean"},
                                                          "level": {"enum": ["ok", "suspect", "jammed",
                                                                             "spoofed"]}}}}},
                                       responses=_REFUSED)},
            "/quality": {"get": _op("The time-quality record of a range, merged to at most max_points rows",
                                    params=[*_RANGE, {"name": "max_points", "in": "query",
                                                      "schema": {"type": "integer", "minimum": 10,
                                                                 "maximum": 5000}}])},
            "/quality.csv": {"get": _op("The time-quality record of a range as CSV", params=_RANGE,
                                        content={"text/csv": {"schema": {"type": "string"}}})},
            "/stability": {"get": _op("ADEV, MTIE and TDEV of the LOCKED one-second phase samples (never across a "
                                      "gap) with the G.8272 PRTC masks and a pass/fail verdict per mask",
                                      params=_RANGE)},
            "/system": {"get": _op("Version, uptime, CPU and memory of each process (appliance, NTP workers, NTS-KE, "
                                   "console, SNMP agent), disk use of the state directory, and NTP client "
                                   "statistics: request rate, busiest clients of the last minute, KoDs sent")},
            "/openapi.json": {"get": _op("This document")},
        },
    }
