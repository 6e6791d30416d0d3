"""What the clock discipline learned about the local oscillator, as it survives a restart.

Pure core: the record and its validation (a state that cannot be valid cannot be built).  Saving and loading it is
the edge's job (``appliance/edge/persist.py``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

FORMAT_VERSION = 1
# Annotation (a string under ``from __future__ import annotations``) -> accepted JSON value types.
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,), "str": (str,), "float": (int, float), "float | None": (int, float, type(None)),
}
_NON_NEGATIVE = ("frequency_sigma_ppb", "aging_sigma_ppb_per_s", "error_bound_ns", "locked_seconds")


@dataclass(frozen=True, kw_only=True)
class LearnedState:
    """The discipline's knowledge of the local oscillator at the moment it was saved."""

    version: int = FORMAT_VERSION
    saved_at_tai_ns: int
    oscillator: str  # configured oscillator name; a state learned on another part is useless
    state: str  # clock state name when saved
    frequency_ppb: float  # the correction that made the oscillator run on time
    frequency_sigma_ppb: float
    aging_ppb_per_s: float
    aging_sigma_ppb_per_s: float
    temp_coeff_ppb_per_k: float | None  # None until the temperature model has been learned
    error_bound_ns: int
    locked_seconds: int  # how long it had been learning

    def __post_init__(self) -> None:
        # Validating here means neither save_state nor load_state can ever handle an impossible state.
        problems = _type_problems(self) or _value_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type.startswith("float") and isinstance(value, int):
                object.__setattr__(self, field.name, float(value))  # JSON may spell 3.0 as 3


def _type_problems(learned: LearnedState) -> list[str]:
    problems = []
    for field in dataclasses.fields(learned):
        value = getattr(learned, field.name)
        if isinstance(value, bool) or not isinstance(value, _JSON_TYPES[field.type]):
            problems.append(f"{field.name} must be {field.type}, not {type(value).__name__}")
    return problems


def _value_problems(learned: LearnedState) -> list[str]:
    problems = []
    for field in dataclasses.fields(learned):
        value = getattr(learned, field.name)
        # float(int) guards against ints too large for a float as well as NaN and infinities.
        if field.type.startswith("float") and value is not None and not math.isfinite(_as_float(value)):
            problems.append(f"{field.name} is not a finite number")
    problems += [f"{name} must be >= 0" for name in _NON_NEGATIVE if getattr(learned, name) < 0]
    if learned.version != FORMAT_VERSION:
        problems.append(f"version must be {FORMAT_VERSION}")
    if not learned.oscillator:
        problems.append("oscillator must not be empty")
    return problems


def _as_float(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:
        return math.inf
