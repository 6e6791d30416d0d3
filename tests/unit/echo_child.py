"""A child process for tests/unit/test_child_process.py: ``python -m tests.unit.echo_child <fd>``.

It reports, once a second, what the appliance started it with, the last status it was published, the result of an
``add`` call it makes at start, and the notices posted to it."""

from __future__ import annotations

import sys
import threading
from typing import Any

from appliance.edge.channel import CallFailed
from appliance.edge.child import start_child


def main(fd: int) -> int:
    started = start_child(fd, "echo")
    if started is None:
        return 1
    seen: dict[str, Any] = {"greeting": started.first["greeting"], "state": started.first["publication"]["status"],
                            "notices": [], "extra": started.first["publication"].get("extra")}

    def calls() -> None:  # from a thread of its own, as the console's workers do: replies come through serve()
        try:
            seen["sum"] = started.channel.call("add", 2, 3)
        except CallFailed as exc:
            seen["sum"] = str(exc)
        try:
            started.channel.call("nonesuch")
        except CallFailed as exc:
            seen["refused"] = str(exc)
        started.report_every(lambda: dict(seen), "echo-report")

    threading.Thread(target=calls, daemon=True).start()

    def on_message(message: dict[str, Any]) -> None:
        if message.get("type") == "status":
            seen["state"] = message["status"]
        elif message.get("type") == "notice":
            seen["notices"].append(message["text"])
            started.channel.send({"type": "heard", "text": message["text"]})

    started.serve(on_message)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
