"""Drills on the simulated world: the sky, the receivers, attacks on them, and the other references it offers.

Pure (the world it is given).  ``apply`` is what ``appliance world ACTION [VALUE]`` does on a running appliance, and
what the attack trials (``sim/attacks.py``) stage; it returns a short text of what was done, or raises ValueError
with what is wrong.
"""

from __future__ import annotations

from typing import Any

from appliance.events import Constellation

WORLD_ACTIONS = {
    "block-sky": "block the antenna's view of the sky (VALUE: which receiver's, 1 to N of [[gnss]]; default 1)",
    "clear-sky": "give the antenna its sky back (VALUE: which receiver's)",
    "receiver-off": "power the receiver off (VALUE: which, 1 to N; default 1)",
    "receiver-on": "power the receiver on (VALUE: which)",
    "receiver-reset": "reset the receiver (no fix for 30 s; VALUE: which)",
    "spoof-push": "push the receiver's time by VALUE ns/s (default 100)",
    "spoof-step": "step the receiver's time by VALUE ns (default 1000)",
    "spoof-position": "push the receiver's position VALUE m north (default 100)",
    "meacon": "replay the whole sky with a delay of VALUE ns (default 2000)",
    "jam": "jam: C/N0 down by VALUE dB (default 15), jamming indicator up",
    "spoof-system": "spoof one constellation: VALUE is name:ns, e.g. beidou:400",
    "fake-sky": "a spoofer's own constellation replaces the real sky",
    "stop-attacks": "end every attack: the true sky returns",
    "antenna-open": "cut the antenna cable (the receiver reports an open circuit)",
    "antenna-short": "short the antenna cable (the receiver reports a short circuit)",
    "antenna-ok": "repair the antenna cable",
    "receiver-firmware": "the receiver comes back with firmware VALUE (default TIM 2.24): a restart",
    "receiver-mute": "the receiver stops answering commands (its data still flows)",
    "receiver-unmute": "the receiver answers commands again",
    "ptp-off": "the simulated upstream PTP grandmaster goes silent", "ptp-on": "it comes back",
    "ptp-offset": "the upstream PTP grandmaster's time is off by VALUE ns (default 5000)",
    "ntp-off": "the simulated NTP upstream servers go silent", "ntp-on": "they come back",
    "receiver2-off": "power the second receiver off", "receiver2-on": "power it on",
    "receiver2-step": "step the second receiver's time by VALUE ns (default 1000)",
}


def apply(world: Any, action: str, value: str = "") -> str:
    """Do ``action`` to the world; the text says what was done."""
    if action not in WORLD_ACTIONS:
        raise ValueError(f"world takes {', '.join(WORLD_ACTIONS)}")
    if action.startswith("receiver2-"):
        return _second_receiver(world, action, value)
    if action.startswith(("ptp-", "ntp-")):
        return _upstream(world, action, value)
    if action in ("block-sky", "clear-sky", "receiver-off", "receiver-on", "receiver-reset"):
        return _receiver(world, action, value)
    if action.startswith("antenna-") or action in ("receiver-firmware", "receiver-mute", "receiver-unmute"):
        return _hardware(world, action, value)
    return _attack(world, action, value)


def _number(value: str, default: float) -> float:
    try:
        return float(value) if value else default
    except ValueError:
        raise ValueError(f"{value!r} is not a number") from None


def _second_receiver(world: Any, action: str, value: str) -> str:
    if len(world.receivers) < 2:
        raise ValueError("the simulated world has no second receiver (a second [[gnss]] table)")
    slot = world.receivers[1]
    if action == "receiver2-step":
        step = int(_number(value, 1000.0))
        slot.receiver.conditions.time_offset_ns += step
        return f"second receiver stepped {step:+d} ns"
    slot.powered = action == "receiver2-on"
    return action


def _upstream(world: Any, action: str, value: str) -> str:
    name = action[:3]
    upstream = world.upstreams.get(name)
    if upstream is None:
        raise ValueError(f"the simulated world has no {name.upper()} upstream (sim.{name}_upstream)")
    if action.endswith("-offset"):
        upstream.bias_ns = _number(value, 5000.0)
        return f"{name} upstream off by {upstream.bias_ns:+g} ns"
    upstream.powered = action.endswith("-on")
    return action


def _receiver(world: Any, action: str, value: str) -> str:
    count = len(world.receivers)
    number = int(_number(value, 1)) if value else 1
    if not 1 <= number <= count:
        raise ValueError(f"the simulated world has receivers 1 to {count} ([[gnss]] tables), not {value}")
    slot = world.receivers[number - 1]
    if action in ("block-sky", "clear-sky"):
        slot.receiver.conditions.blocked = action == "block-sky"
    elif action in ("receiver-off", "receiver-on"):
        slot.powered = action == "receiver-on"
    else:
        slot.receiver.reset(world.true_ns(), 30)
    return action if not value else f"{action} (receiver {number})"


def _hardware(world: Any, action: str, value: str) -> str:
    """The receiver's hardware: its antenna cable, its firmware, whether it answers commands (VALUE: the receiver's
    number, or the new firmware's version)."""
    if action == "receiver-firmware":
        rx = world.receivers[0].receiver
    else:
        count = len(world.receivers)
        number = int(_number(value, 1)) if value else 1
        if not 1 <= number <= count:
            raise ValueError(f"the simulated world has receivers 1 to {count} ([[gnss]] tables), not {value}")
        rx = world.receivers[number - 1].receiver
    if action.startswith("antenna-"):
        # MON-HW aStatus / MON-RF antStatus: 2 ok, 3 short, 4 open; no antenna, no sky (until repaired)
        rx.conditions.antenna_status = {"antenna-ok": 2, "antenna-short": 3, "antenna-open": 4}[action]
        return action
    if action == "receiver-firmware":
        firmware = value or "TIM 2.24"
        rx.change_firmware(firmware, world.true_ns())
        return f"receiver restarted with firmware {firmware}"
    rx.mute = action == "receiver-mute"
    return action


def _attack(world: Any, action: str, value: str) -> str:
    rx = world.receivers[0].receiver
    c = rx.conditions
    if action == "spoof-push":
        rate = _number(value, 100.0)
        c.push_ns_per_s, c.push_since_ns = rate, world.true_ns()
        return f"spoof-push {rate:g} ns/s"
    if action == "spoof-step":
        step = int(_number(value, 1000.0))
        c.time_offset_ns += step
        return f"spoof-step {step:+d} ns"
    if action == "spoof-position":
        metres = _number(value, 100.0)
        c.position_offset_m = (metres, 0.0, 0.0)
        return f"spoof-position {metres:g} m north"
    if action == "meacon":
        delay = int(_number(value, 2000.0))
        c.meaconing_delay_ns = delay
        return f"meacon {delay} ns"
    if action == "jam":
        db = _number(value, 15.0)
        c.cn0_offset_db, c.jam_indicator, c.jamming_state = -abs(db), 200, 3
        return f"jam {db:g} dB"
    if action == "spoof-system":
        name, _, ns = value.partition(":")
        systems = {k.value.lower(): k for k in Constellation}
        if name.lower() not in systems or not ns:
            raise ValueError(f"expected name:ns with name one of {', '.join(sorted(systems))}")
        c.system_offsets_ns = {systems[name.lower()]: int(ns)}
        return f"spoof-system {name} {int(ns):+d} ns"
    if action == "fake-sky":
        c.fake_sky_seed = rx.fake_sky_seed()
    elif action == "stop-attacks":
        fresh = type(c)()
        fresh.blocked = c.blocked
        rx.conditions = fresh
    return action
