"""Setting a receiver up: find out what it is, send it the plan, check every answer, and keep watching it.

Pure core.  One ``ReceiverSetup`` per receiver line, driven by the receiver (``gnss/receiver.py``): ``start`` when the
line opens (at start and after every reconnect), ``on_frame`` with every frame the line delivers, ``tick`` now and
then.  It returns what the line must do (``ReceiverWrite``, ``ReceiverBaud``) and the receiver's faults
(``ReceiverFault``); nothing here reads a clock or touches a device.

The sequence:

1. Identify: UBX MON-VER and Unicore VERSIONA are both asked (or only the named family's).  Nothing valid on the line
   at all means a wrong speed: the line hunts through the standard rates.  A receiver that talks NMEA but answers
   neither question is an NMEA receiver: read as it is, never configured (no alarm unless a family was named).
2. Configure: u-blox generation 9 by CFG-VALSET chunks (each ACK-ACKed), M8 and older by CFG-* messages, Unicore by
   its ASCII commands (each answered OK).  A refused VALSET chunk is retried key by key, so the alarm names the key.
   The receiver's speed changes last, and the line follows it.
3. Verify: generation 9 reads every key back with CFG-VALGET; M8 polls CFG-TP5, CFG-TMODE2 and CFG-NAV5 and compares.
4. Watch: MON-VER (or VERSIONA) every ``health_interval_ns``; a receiver that stops answering, restarts (a boot
   banner, or the messages it was set up to send stop while others go on) or changes firmware is an alarm, and a
   restarted receiver is set up again.

A NAK, a missing answer or a read-back that differs is the ``gnss-setup`` alarm naming the key; the appliance runs on
with what the receiver sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from appliance.events import ReceiverBaud, ReceiverFault, ReceiverNews, ReceiverWrite
from appliance.gnss import ubxcfg, unicore
from appliance.gnss.framer import NmeaFrame, UbxFrame, ubx_frame_bytes
from appliance.gnss.plan import ReceiverPlan
from appliance.units import NS_PER_S

SETUP, UNANSWERED, RESTARTED = "gnss-setup", "gnss-unanswered", "gnss-restarted"
HUNT_BAUDS = (9600, 38400, 115200, 4800, 19200, 57600, 230400, 460800)
ACK = (0x05, 0x01)
NAK = (0x05, 0x00)
MON_VER = (0x0A, 0x04)
VALSET = (0x06, 0x8A)
VALGET = (0x06, 0x8B)
CFG_PRT = (0x06, 0x00)
TIM_TP = (0x0D, 0x01)
# A message each family is set up to send every second and does not send out of the box.
HEARTBEATS = {"ublox9": "TIM-TP", "ublox8": "TIM-TP", "unicore": "ZDA"}
# What a u-blox prints when it boots (UBX-TXT / $GxTXT): its banner, its hardware and its ROM.
BOOT_BANNERS = ("u-blox AG", "HW UBX", "ROM CORE", "ROM BASE")
# M8 configuration messages by id (class CFG), for naming them.
M8_NAMES = {0x00: "CFG-PRT", 0x01: "CFG-MSG", 0x09: "CFG-CFG", 0x24: "CFG-NAV5", 0x31: "CFG-TP5", 0x3D: "CFG-TMODE2",
            0x3E: "CFG-GNSS"}


@dataclass(frozen=True)
class Identity:
    family: str  # "ublox9", "ublox8", "unicore"
    model: str
    firmware: str
    protocol: str = ""

    def text(self) -> str:
        parts = [self.model or "u-blox" if self.family.startswith("ublox") else self.model or "Unicore"]
        if self.firmware:
            parts.append(f"firmware {self.firmware}")
        if self.protocol:
            parts.append(f"protocol {self.protocol}")
        return ", ".join(parts)


@dataclass
class _Step:
    what: str  # named in status and alarms: the message and its keys
    data: bytes
    answer: str  # "ack" (UBX ACK of match), "valget", "poll" (UBX answer of match), "unicore" (answer to match)
    match: Any
    keys: tuple[tuple[str, int], ...] = ()  # VALSET/VALGET: the keys and the values set
    attempts: int = 0
    sent_ns: int | None = None
    then_baud: int | None = None  # the line follows the receiver's new speed once this is answered (or sent)
    plan: ReceiverPlan | None = None  # poll: the plan the answer is compared with


@dataclass
class _Progress:
    done: int = 0
    total: int = 0
    problems: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # keys or messages the receiver refused or read back wrong
    unanswered: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the plan had to leave out for this receiver
    keys: int = 0  # generation 9: keys set (and ACKed)


class ReceiverSetup:
    def __init__(self, name: str, plan: ReceiverPlan, family: str = "auto", configure: bool = True,
                 line_baud: int = 9600, answer_timeout_ns: int = 1_500 * 1_000_000, attempts: int = 3,
                 health_interval_ns: int = 60 * NS_PER_S, message_gap_ns: int = 5 * NS_PER_S):
        self.name, self.plan, self.family_setting, self.configure = name, plan, family, configure
        self.line_baud = line_baud
        self._timeout_ns, self._attempts = answer_timeout_ns, attempts
        self._health_ns, self._gap_ns = health_interval_ns, message_gap_ns
        self.state = "off" if family == "nmea" else "idle"
        self.identity: Identity | None = None
        self.previous_identity: Identity | None = None
        self.progress = _Progress()
        self.detail = "an NMEA receiver: read as it is, never configured" if family == "nmea" else ""
        self.survey: Any = None  # the receiver's latest survey-in report (UBX TIM-SVIN)
        self._steps: list[_Step] = []
        self._hunt: list[int] = []
        self._frames_ok = 0  # valid frames since the line (re)opened or changed speed
        self._probe_sent_ns: int | None = None
        self._probes = 0
        self._health_due_ns: int | None = None
        self._health_sent_ns: int | None = None
        self._health_misses = 0
        self._last_tp_ns: int | None = None
        self._last_zda_ns: int | None = None  # a Unicore board sends ZDA only once set up to
        self._last_frame_ns: int | None = None
        self._faults: dict[str, str] = {}
        self._done_ns: int | None = None
        # Receivers take a fixed position's height above the ellipsoid; the settings give it above mean sea level.
        # The receiver's own geoid separation (GGA, NAV-PVT) at its first fix joins the two.
        self.geoid_separation_m: float | None = None

    # --- inputs ----------------------------------------------------------------------------------------------
    def start(self, now_ns: int) -> list[object]:
        """The line opened (at start or after a reconnect): identify the receiver, then set it up."""
        if self.state == "off":
            return []
        self._steps, self._frames_ok = [], 0
        self._hunt = [b for b in (self.line_baud, *HUNT_BAUDS) if b != self.line_baud] if self.configure else []
        self.progress = _Progress()
        self._health_due_ns = self._health_sent_ns = None
        self._health_misses = 0
        self._last_tp_ns = self._last_zda_ns = None
        return self._probe(now_ns)

    def on_frame(self, frame: object, now_ns: int) -> list[object]:
        """A valid frame from the line: an answer, a boot banner, or traffic that shows the receiver alive."""
        if self.state == "off":
            return []
        self._frames_ok += 1
        self._last_frame_ns = now_ns
        out: list[object] = []
        if isinstance(frame, UbxFrame):
            key = (frame.msg_class, frame.msg_id)
            if key == (0x01, 0x07) and len(frame.payload) >= 40 and frame.payload[21] & 0x01:
                height_mm, hmsl_mm = int.from_bytes(frame.payload[32:36], "little", signed=True), \
                    int.from_bytes(frame.payload[36:40], "little", signed=True)
                self.geoid_separation_m = (height_mm - hmsl_mm) / 1000.0
            if key == TIM_TP:
                self._last_tp_ns = now_ns
            elif key == MON_VER:
                out += self._identified(self._ublox_identity(frame.payload), now_ns)
            elif key in (ACK, NAK) or frame.msg_class == 0x06:
                out += self._answer(frame, now_ns)
        elif isinstance(frame, NmeaFrame):
            text = frame.text
            if text[3:6] == "ZDA":
                self._last_zda_ns = now_ns
            if text[3:6] == "GGA" and self.geoid_separation_m is None:
                self.geoid_separation_m = _gga_separation_m(text)
            if any(b in text for b in BOOT_BANNERS) and text[3:6] == "TXT" and self.state in ("done", "incomplete"):
                out += self._restarted(f"the receiver restarted ({text.split(',')[-1].split('*')[0]})", now_ns)
            version = unicore.parse_version(text) if text.startswith("#VERSION") else None
            if version is not None:
                out += self._identified(Identity("unicore", version.model, version.firmware), now_ns)
            elif text.startswith("$command,"):
                out += self._answer(frame, now_ns)
        return out

    def on_survey(self, survey: Any) -> None:
        self.survey = survey

    def tick(self, now_ns: int) -> list[object]:
        if self.state in ("off", "idle"):
            return []
        if self.state == "identifying":
            return self._identify_tick(now_ns)
        if self.state in ("configuring", "verifying"):
            return self._step_tick(now_ns)
        return self._watch(now_ns)

    # --- identifying -----------------------------------------------------------------------------------------
    def _probe(self, now_ns: int) -> list[object]:
        self.state, self._probe_sent_ns = "identifying", now_ns
        self._probes += 1
        out: list[object] = []
        if self.family_setting in ("auto", "ublox9", "ublox8"):
            out.append(self._write(ubxcfg.mon_ver_poll(), "UBX MON-VER poll"))
        if self.family_setting in ("auto", "unicore"):
            # a line ending first: a Unicore board would read the binary poll before it as the start of a command
            out.append(self._write(b"\r\n" + unicore.encode(unicore.version_query()), "Unicore VERSIONA"))
        return out

    def _identify_tick(self, now_ns: int) -> list[object]:
        assert self._probe_sent_ns is not None
        if now_ns - self._probe_sent_ns < self._timeout_ns:
            return []
        if self._frames_ok == 0 and self._hunt:  # nothing valid at this speed: try the next
            baud = self._hunt.pop(0)
            self.line_baud = baud
            self.detail = f"no valid data: trying {baud} baud"
            return [ReceiverBaud(self.name, baud), *self._probe(now_ns)]
        if self._probes < self._attempts:
            return self._probe(now_ns)
        self._probes = 0
        if self.family_setting == "auto":
            self.state = "nmea"
            self.detail = ("no answer to UBX MON-VER or Unicore VERSIONA: read as an NMEA receiver, not configured"
                           if self._frames_ok else "nothing valid on the line at any speed")
            return []
        # a named family that does not say what it is: set it up all the same, its answers will tell
        return self._configure(self.identity or Identity(self.family_setting, "", ""), now_ns)

    def _identified(self, ident: Identity | None, now_ns: int) -> list[object]:
        if ident is None:
            return []
        out: list[object] = []
        if self.state in ("done", "incomplete", "nmea"):
            self._health_sent_ns, self._health_misses = None, 0
            out += self._fault(UNANSWERED, False, "the receiver answers again", now_ns)
            if self.identity is not None and ident != self.identity and self.identity.model:
                change = f"receiver changed: {self.identity.text()} -> {ident.text()}"
                self.previous_identity, self.identity = self.identity, ident
                return out + self._restarted(change, now_ns)
            self.identity = ident
            return out
        if self.state != "identifying":
            return out
        if self.identity is not None and self.identity.model and ident != self.identity:
            self.previous_identity = self.identity
            out += self._fault(RESTARTED, True, f"receiver changed: {self.identity.text()} -> {ident.text()}",
                               now_ns)
        self.identity = ident
        self._probes = 0
        out.append(ReceiverNews(self.name, f"receiver is {ident.text()}", now_ns))
        out += self._fault(UNANSWERED, False, "the receiver answers", now_ns)
        if not self.configure:
            self.state, self.detail = "done", f"{ident.text()}: left as it is (gnss.configure = false)"
            self._schedule_health(now_ns)
            return out
        return out + self._configure(ident, now_ns)

    @staticmethod
    def _ublox_identity(payload: bytes) -> Identity | None:
        try:
            ver = ubxcfg.decode_mon_ver(payload)
        except ValueError:
            return None
        return Identity(ubxcfg.family_of(ver), ver.model, ver.firmware, ver.protocol)

    # --- configuring -----------------------------------------------------------------------------------------
    def _configure(self, ident: Identity, now_ns: int) -> list[object]:
        family = ident.family if self.family_setting == "auto" else self.family_setting
        self.progress = _Progress()
        self._steps = self._plan_steps(family)
        self.progress.total = len(self._steps)
        self.state, self.detail = "configuring", f"setting up {ident.text() or family}"
        return self._send_next(now_ns)

    def _plan_steps(self, family: str, part: str = "plan") -> list[_Step]:
        """The steps of the plan ("plan"), or of its timing mode alone ("tmode").  A fixed position's timing mode
        waits at the end for the geoid separation: a deferred step that becomes the "tmode" steps once it is
        known."""
        plan, steps = self.plan, []
        tmode_only = part == "tmode"
        baud_change = plan.baud if plan.baud != self.line_baud and not tmode_only else None
        hold = part == "plan" and plan.mode == "fixed"

        def wanted(is_tmode: bool) -> bool:
            return is_tmode if tmode_only else not (hold and is_tmode)

        if hold:
            steps.append(_Step("fixed-position timing mode (waits for the receiver's geoid separation)", b"",
                               "deferred", family))
        if family == "ublox9":
            items = [(k, v) for k, v in ubxcfg.gen9_items(plan) if k != "CFG-UART1-BAUDRATE"
                     and wanted(k.startswith("CFG-TMODE-"))]
            for chunk in _chunks(items, 64):
                steps.append(_Step(_keys_text(chunk), ubx_frame_bytes(*VALSET, ubxcfg.valset_payload(chunk, plan.store)),
                                   "ack", VALSET, tuple(chunk)))
            for chunk in _chunks(items, 64):
                steps.append(_Step("read back " + _keys_text(chunk),
                                   ubx_frame_bytes(*VALGET, ubxcfg.valget_payload([k for k, _ in chunk])),
                                   "valget", VALGET, tuple(chunk)))
            if baud_change:
                chunk = [("CFG-UART1-BAUDRATE", baud_change)]
                steps.append(_Step(f"CFG-UART1-BAUDRATE={baud_change}",
                                   ubx_frame_bytes(*VALSET, ubxcfg.valset_payload(chunk, plan.store)), "ack", VALSET,
                                   tuple(chunk), then_baud=baud_change))
        elif family == "ublox8":
            fitted = _m8_plan(plan)
            left = [c for c in plan.constellations if c not in fitted.constellations]
            if left and not tmode_only:
                self.progress.notes.append(f"{', '.join(left)} left out: an M8 receives two of GPS/Galileo, GLONASS "
                                           "and BeiDou, not three")
            plan = self.plan = fitted
            messages = ubxcfg.m8_messages(plan)
            prt = [m for m in messages if (m[0], m[1]) == CFG_PRT]
            save = [m for m in messages if (m[0], m[1]) == (0x06, 0x09)]
            for cls, mid, payload in (m for m in messages if (m[0], m[1]) not in (CFG_PRT, (0x06, 0x09))
                                      and wanted((m[0], m[1]) == (0x06, 0x3D))):
                steps.append(_Step(_m8_name(mid, payload), ubx_frame_bytes(cls, mid, payload), "ack", (cls, mid)))
            for cls, mid, payload in ubxcfg.m8_readback_polls(plan):
                if wanted(mid == 0x3D) and not (mid == CFG_PRT[1] and baud_change):
                    steps.append(_Step(f"read back {M8_NAMES[mid]}", ubx_frame_bytes(cls, mid, payload), "poll",
                                       (cls, mid), plan=plan))
            for cls, mid, payload in save if not tmode_only else []:
                steps.append(_Step("CFG-CFG save", ubx_frame_bytes(cls, mid, payload), "ack", (cls, mid)))
            if baud_change:
                for cls, mid, payload in prt:
                    steps.append(_Step(f"CFG-PRT baud {baud_change}", ubx_frame_bytes(cls, mid, payload), "ack",
                                       (cls, mid), then_baud=baud_change))
        elif family == "unicore":
            model = self.identity.model if self.identity else ""
            for command in unicore.commands(plan, mode_syntax=unicore.mode_syntax_for(model)):
                words = command.split()
                if not wanted(words[0].upper() == "MODE"):
                    continue
                is_baud = len(words) >= 3 and words[0].upper() == "CONFIG" and words[1].upper().startswith("COM")
                if is_baud and not baud_change:
                    continue
                steps.append(_Step(command, unicore.encode(command), "unicore", command,
                                   then_baud=baud_change if is_baud else None))
        if hold:  # the deferred step goes last, before a change of speed
            at = next((i for i, st in enumerate(steps) if st.then_baud is not None), len(steps))
            steps.insert(at, steps.pop(0))
        return steps

    def _timing_mode_steps(self, family: str) -> list[_Step]:
        """A fixed position's timing-mode steps, with the height above the ellipsoid now that it is known."""
        assert self.geoid_separation_m is not None
        msl = self.plan
        self.plan = replace(msl, fixed_height_m=msl.fixed_height_m + self.geoid_separation_m)
        try:
            return self._plan_steps(family, "tmode")
        finally:
            self.plan = msl

    def _send_next(self, now_ns: int) -> list[object]:
        if not self._steps:
            return self._finished(now_ns)
        step = self._steps[0]
        if step.answer == "deferred":
            if self.geoid_separation_m is None:
                self.detail = "fixed position: waiting for the receiver's first fix (its geoid separation)"
                return []
            built = self._timing_mode_steps(step.match)
            self._steps[0:1] = built
            self.progress.total += len(built) - 1
            return self._send_next(now_ns)
        step.attempts += 1
        step.sent_ns = now_ns
        if step.answer == "valget":
            self.state = "verifying"
        return [self._write(step.data, step.what)]

    def _step_tick(self, now_ns: int) -> list[object]:
        step = self._steps[0] if self._steps else None
        if step is not None and step.answer == "deferred":
            return self._send_next(now_ns)
        if step is None or step.sent_ns is None or now_ns - step.sent_ns < self._timeout_ns:
            return []
        if step.attempts < self._attempts:
            return self._send_next(now_ns)
        self._steps.pop(0)
        if step.then_baud is not None:  # it may have switched before it could answer: follow it
            self.progress.unanswered.append(step.what)
            return [*self._follow(step.then_baud), *self._send_next(now_ns)]
        self.progress.unanswered.append(step.what)
        self.progress.problems.append(f"no answer to {step.what} after {step.attempts} tries")
        return self._send_next(now_ns)

    def _answer(self, frame: UbxFrame | NmeaFrame, now_ns: int) -> list[object]:
        if self.state not in ("configuring", "verifying") or not self._steps:
            return []
        step = self._steps[0]
        verdict = _judge(step, frame, self.plan)
        if verdict is None:
            return []  # not this step's answer
        ok, problem = verdict
        self._steps.pop(0)
        out: list[object] = []
        if ok:
            self.progress.done += 1
            if step.answer == "ack" and step.match == VALSET:
                self.progress.keys += len(step.keys)
        elif step.answer == "ack" and step.match == VALSET and len(step.keys) > 1:
            # which key? each one alone, in place of the chunk
            singles = [_Step(_keys_text([kv]), ubx_frame_bytes(*VALSET, ubxcfg.valset_payload([kv], self.plan.store)),
                             "ack", VALSET, (kv,)) for kv in step.keys]
            self._steps[0:0] = singles
            self.progress.total += len(singles) - 1
        else:
            self.progress.refused.append(step.what)
            self.progress.problems.append(problem)
        if step.then_baud is not None:
            out += self._follow(step.then_baud)
        return out + self._send_next(now_ns)

    def _follow(self, baud: int) -> list[object]:
        if baud != self.line_baud:
            self.progress.notes.append(f"moved from {self.line_baud} to {baud} baud")
        self.line_baud = baud
        return [ReceiverBaud(self.name, baud)]

    def _finished(self, now_ns: int) -> list[object]:
        p = self.progress
        ident = self.identity.text() if self.identity else "the receiver"
        out: list[object] = []
        if p.total and len(p.unanswered) == p.total:
            self.state = "incomplete"
            self.detail = f"{ident} answered none of {p.total} set-up commands"
            out += self._fault(UNANSWERED, True, f"{self.name}: {self.detail}", now_ns)
            out += self._fault(SETUP, False, "", now_ns)
        elif p.problems:
            self.state = "incomplete"
            self.detail = f"{ident}: set up except " + "; ".join(p.problems[:4]) + (
                f" (+{len(p.problems) - 4} more)" if len(p.problems) > 4 else "")
            out += self._fault(SETUP, True, f"{self.name}: {self.detail}", now_ns)
        else:
            self.state = "done"
            family = self.identity.family if self.identity else self.family_setting
            checked = (f", {p.keys} keys set and read back)" if p.keys else
                       ", each answered OK)" if family == "unicore" else ", every setting read back)")
            self.detail = f"{ident}: set up ({p.done} commands answered{checked}" + "".join(
                f"; {note}" for note in p.notes)
            out += self._fault(SETUP, False, self.detail, now_ns)
        out += self._fault(RESTARTED, False, self.detail, now_ns)
        out.append(ReceiverNews(self.name, self.detail, now_ns))
        self._done_ns = now_ns
        self._schedule_health(now_ns)
        return out

    # --- watching ----------------------------------------------------------------------------------------------
    def _schedule_health(self, now_ns: int) -> None:
        self._health_due_ns = now_ns + self._health_ns

    def _watch(self, now_ns: int) -> list[object]:
        out: list[object] = []
        family = self.identity.family if self.identity else ""
        if self.state in ("done", "incomplete") and family in HEARTBEATS and self.configure:
            # set up to send TIM-TP (u-blox) or ZDA (Unicore) every second, which neither sends out of the box: its
            # silence while the line talks means the set-up was lost
            last = self._last_tp_ns if family.startswith("ublox") else self._last_zda_ns
            since = last if last is not None else self._done_ns
            talking = self._last_frame_ns is not None and now_ns - self._last_frame_ns < self._gap_ns
            if since is not None and talking and now_ns - since > self._gap_ns:
                return self._restarted(f"the receiver stopped sending {HEARTBEATS[family]} it was set up to send for "
                                       f"{(now_ns - since) // NS_PER_S} s (restarted, or set up by something else)",
                                       now_ns)
        if self._health_due_ns is None or self.state == "nmea" or self.identity is None:
            return out
        if self._health_sent_ns is not None and now_ns - self._health_sent_ns >= self._timeout_ns:
            self._health_sent_ns = None
            self._health_misses += 1
            if self._health_misses >= self._attempts:
                out += self._fault(UNANSWERED, True, f"{self.name}: {self.identity.text()} stopped answering "
                                   f"({self._health_misses} version queries unanswered; its data still arrives)"
                                   if self._last_frame_ns and now_ns - self._last_frame_ns < self._gap_ns else
                                   f"{self.name}: {self.identity.text()} stopped answering", now_ns)
            self._health_due_ns = now_ns  # ask again now
        if self._health_sent_ns is None and now_ns >= self._health_due_ns:
            self._health_sent_ns = now_ns
            self._health_due_ns = now_ns + (self._health_ns if self._health_misses == 0 else self._timeout_ns)
            query = (ubxcfg.mon_ver_poll() if family.startswith("ublox") else
                     unicore.encode(unicore.version_query()))
            out.append(self._write(query, "version query (health)"))
        return out

    def _restarted(self, why: str, now_ns: int) -> list[object]:
        out = self._fault(RESTARTED, True, f"{self.name}: {why}", now_ns)
        if not self.configure:
            return out
        self._steps = []
        self.state = "identifying"
        self._probes = 0
        return out + self._probe(now_ns)

    # --- helpers -----------------------------------------------------------------------------------------------
    def _write(self, data: bytes, what: str) -> ReceiverWrite:
        return ReceiverWrite(self.name, data, what)

    def _fault(self, code: str, active: bool, text: str, now_ns: int) -> list[object]:
        if not active and code not in self._faults:
            return []
        if active and self._faults.get(code) == text:
            return []
        if active:
            self._faults[code] = text
        else:
            del self._faults[code]
        return [ReceiverFault(self.name, code, active, text, now_ns)]

    def snapshot(self) -> dict[str, Any]:
        ident = self.identity
        survey = self.survey
        return {
            "state": self.state, "detail": self.detail, "family": ident.family if ident else self.family_setting,
            "model": ident.model if ident else "", "firmware": ident.firmware if ident else "",
            "protocol": ident.protocol if ident else "", "mode": self.mode_text(),
            "commands_answered": self.progress.done, "commands": self.progress.total,
            "problems": list(self.progress.problems), "line_baud": self.line_baud,
            "survey": None if survey is None else {
                "active": survey.active, "valid": survey.valid, "duration_s": survey.duration_s,
                "observations": survey.observations, "std_m": round(survey.variance_mm2 ** 0.5 / 1000, 3)},
        }

    def fixed_position_mode(self) -> bool:
        """Whether the receiver is known to time from a fixed position: set up so, or its own survey-in is done."""
        if not self.configure or self.state not in ("done", "incomplete"):
            return False
        s = self.survey
        return self.plan.mode == "fixed" or (s is not None and s.valid and not s.active)

    def mode_text(self) -> str:
        """The receiver's timing mode as set (and, in survey-in, how far it has got)."""
        if self.state in ("off", "nmea") or not self.configure:
            return "as the receiver is (not configured)"
        if self.plan.mode == "fixed":
            where = f"fixed position {self.plan.fixed_lat_deg:.6f}, {self.plan.fixed_lon_deg:.6f}, "
            if self.geoid_separation_m is None:
                return where + f"{self.plan.fixed_height_m:.1f} m above sea level (waiting for the geoid separation)"
            return where + f"{self.plan.fixed_height_m + self.geoid_separation_m:.1f} m (ellipsoid)"
        s = self.survey
        if s is None:
            return f"survey-in (at least {self.plan.survey_min_s} s, to {self.plan.survey_acc_limit_m:g} m)"
        if s.valid and not s.active:
            return f"survey-in done after {s.duration_s} s: fixed position, time-only fixes"
        return (f"survey-in {s.duration_s}/{self.plan.survey_min_s} s, "
                f"{s.variance_mm2 ** 0.5 / 1000:.1f} m (limit {self.plan.survey_acc_limit_m:g} m)")


def _judge(step: _Step, frame: UbxFrame | NmeaFrame, plan: ReceiverPlan) -> tuple[bool, str] | None:
    """(ok, problem) if ``frame`` answers ``step``; None if it is someone else's."""
    if step.answer == "unicore":
        if not isinstance(frame, NmeaFrame):
            return None
        answer = unicore.answer_of(frame.text)
        if answer is None or not _same_command(answer.command, step.match):
            return None
        return answer.ok, f"{step.what} refused: {answer.text}"
    if not isinstance(frame, UbxFrame):
        return None
    key = (frame.msg_class, frame.msg_id)
    if step.answer == "ack":
        if key not in (ACK, NAK):
            return None
        try:
            acked, cls, mid = ubxcfg.ack_of(frame.msg_class, frame.msg_id, frame.payload)
        except ValueError:
            return None
        if (cls, mid) != step.match:
            return None
        return acked, f"{step.what} refused (NAK)"
    if step.answer == "valget":
        if key == NAK:
            try:
                _, cls, mid = ubxcfg.ack_of(frame.msg_class, frame.msg_id, frame.payload)
            except ValueError:
                return None
            return (False, f"{step.what} refused (NAK)") if (cls, mid) == VALGET else None
        if key != VALGET:
            return None
        try:
            got = ubxcfg.decode_valget(frame.payload)
        except ValueError as exc:
            return False, f"{step.what}: unreadable answer ({exc})"
        wrong = [f"{k} reads back {got[k]}, set {v}" if k in got else f"{k} not read back"
                 for k, v in step.keys if got.get(k) != v]
        return (not wrong, "; ".join(wrong))
    if step.answer == "poll":
        if key != step.match:
            return None
        try:
            wrong = ubxcfg.m8_mismatches(step.plan or plan, frame.msg_class, frame.msg_id, frame.payload)
        except ValueError as exc:
            return False, f"{step.what}: unreadable answer ({exc})"
        return not wrong, "; ".join(wrong)
    return None


def _m8_plan(plan: ReceiverPlan) -> ReceiverPlan:
    """An M8 receives two of the three carriers near L1: keep the constellations, in the order given, that fit."""
    kept: list[str] = []
    for name in plan.constellations:
        if name in ubxcfg.M8_GNSS_IDS and ubxcfg.m8_carrier_conflict([*kept, name]) is None:
            kept.append(name)
    return replace(plan, constellations=tuple(kept)) if tuple(kept) != plan.constellations else plan


def _m8_name(msg_id: int, payload: bytes) -> str:
    name = M8_NAMES.get(msg_id, f"CFG-{msg_id:02X}")
    if msg_id == 0x01 and len(payload) >= 3:
        which = {v: k for k, v in ubxcfg.MESSAGES.items()}.get((payload[0], payload[1]),
                                                                f"{payload[0]:02X}-{payload[1]:02X}")
        return f"CFG-MSG {which} rate {payload[2]}"
    return name


def _gga_separation_m(text: str) -> float | None:
    """GGA's geoid separation (field 11: geoid above the ellipsoid), when it reports a fix."""
    fields = text.split("*")[0].split(",")
    try:
        return float(fields[11]) if len(fields) > 11 and fields[6] not in ("", "0") and fields[11] else None
    except ValueError:
        return None


def _same_command(answered: str, sent: str) -> bool:
    return " ".join(answered.upper().split()) == " ".join(sent.upper().split())


def _chunks(items: list[tuple[str, int]], size: int) -> list[list[tuple[str, int]]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _keys_text(chunk: list[tuple[str, int]] | tuple[tuple[str, int], ...]) -> str:
    if len(chunk) == 1:
        return f"{chunk[0][0]}={chunk[0][1]}"
    return f"CFG-VALSET of {len(chunk)} keys ({chunk[0][0]} .. {chunk[-1][0]})"


def plan_from(settings: Any, integrity: Any, position: tuple[float, float, float] | None,
              geoid_separation_m: float = 0.0) -> ReceiverPlan:
    """The plan from a receiver's settings (``gnss.*``) and the integrity settings: a configured antenna position is
    a fixed-position timing mode (its height above mean sea level plus the geoid separation gives the ellipsoidal
    height receivers take), otherwise survey-in with the integrity survey's duration and scatter."""
    from appliance.config import parse_constellations

    common: dict[str, Any] = dict(pulse_length_ms=settings.pulse_length_ms, baud=settings.baud,
                                  constellations=parse_constellations(settings.constellations),
                                  store=settings.configure_store,
                                  survey_min_s=integrity.survey_s, survey_acc_limit_m=integrity.survey_max_std_m)
    if position is None:
        return ReceiverPlan(mode="survey", **common)
    lat, lon, alt = position
    return ReceiverPlan(mode="fixed", fixed_lat_deg=lat, fixed_lon_deg=lon,
                        fixed_height_m=alt + geoid_separation_m, **common)

