"""The wire format of step records (telemetry/record.go): validation and encoding.

A record is one line of JSON. The client owns the header (job, attempt, rank,
world, step, t); the optional fields are checked and a value that fails is
left out. A NaN or infinite loss is recorded as "NaN", "Infinity" or
"-Infinity" (JSON has no such numbers; the daemon reads them back as floats);
every other number is finite. encode_step writes a step's line directly, a
few microseconds a record on the sender thread; it writes what
encode(build_record(...)) writes, field for field (tests/test_wire.py).
"""

import json
import math
from typing import Any, Dict, Optional

SCHEMA_VERSION = 1
MAX_RECORD_BYTES = 16 << 10  # the daemon's limit, newline excluded

# Validation of the optional fields; anything failing is left out of the record.
_COUNTS = ("samples", "local_batch", "global_batch", "epoch")  # ints >= 0
_DURATIONS = ("dt", "compute_s", "sync_s", "local_sqr", "avg_sqr")  # finite floats >= 0
_HEADER = ("v", "job", "attempt", "rank", "world", "step", "t")  # owned by the client


def _count(value: Any, least: int = 0) -> Optional[int]:
    """value as an int >= least, or None (bools and non-integers are refused)."""
    if isinstance(value, bool):
        return None
    try:
        n = value.__index__()
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None
    return n if n >= least else None


def _number(value: Any, nonneg: bool) -> Optional[float]:
    """value as a finite float (>= 0 when nonneg), or None."""
    if isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    if not math.isfinite(x) or (nonneg and x < 0):
        return None
    return x


def _extra(value: Any) -> Any:
    """A user field kept as is when it is a JSON scalar (finite), else None."""
    if isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return None


# A NaN or infinite loss (a run that diverged) is recorded, not dropped:
# JSON has no such numbers, so the wire carries them as these strings
# (telemetry/loss.go); every other number is finite.
_NONFINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _loss(value: Any) -> Any:
    """value as a loss on the wire: a float, a non-finite one's string, or None."""
    if isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return x if math.isfinite(x) else _NONFINITE[repr(x)]


def build_record(header: Dict[str, Any], step: int, t: float, samples: Any, loss: Any,
                 fields: Dict[str, Any]) -> Dict[str, Any]:
    """The wire record of one step: header, step and t, then every valid optional field."""
    rec = dict(header)
    rec["step"] = step
    rec["t"] = t
    for key, value in fields.items():
        if key in _HEADER or value is None:
            continue
        if key in _COUNTS:
            value = _count(value)
        elif key == "micro":
            value = _count(value, least=1)
        elif key in _DURATIONS:
            value = _number(value, nonneg=True)
        else:
            value = _extra(value)
        if value is not None:
            rec[key] = value
    n = _count(samples) if samples is not None else None
    if n is not None:
        rec["samples"] = n
    x = _loss(loss) if loss is not None else None
    if x is not None:
        rec["loss"] = x
    return rec


def encode(rec: Dict[str, Any]) -> Optional[bytes]:
    """One JSON line, or None when the record is too long for the daemon."""
    line = json.dumps(rec, separators=(",", ":"), allow_nan=False).encode()
    return line + b"\n" if len(line) <= MAX_RECORD_BYTES else None



# The JSON names of the fields the client validates, written once.
_NAMES: Dict[str, str] = {}


def _name(key: str) -> str:
    """key as a JSON name followed by a colon, cached."""
    n = _NAMES.get(key)
    if n is None:
        n = json.dumps(key) + ":"
        if len(_NAMES) < 256:
            _NAMES[key] = n
    return n


def _scalar(value: Any) -> str:
    """A validated value as JSON: a bool, an int, a finite float or a string."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return float.__repr__(value)
    return json.dumps(value)


def step_prefix(header: Dict[str, Any]) -> str:
    """The start of every step line of a worker: "{" and its header."""
    return "{" + ",".join(_name(k) + _scalar(v) for k, v in header.items()) + ","


def encode_step(prefix: str, step: int, t: float, samples: Any, loss: Any,
                fields: Dict[str, Any]) -> Optional[bytes]:
    """encode(build_record(...)) for a worker whose header step_prefix gave."""
    parts = [prefix, '"step":', int.__repr__(step), ',"t":', float.__repr__(float(t))]
    n = _count(samples) if samples is not None else None
    for key, value in fields.items():
        if value is None or key in _HEADER or key == "samples" and n is not None:
            continue
        if key in _DURATIONS:
            value = _number(value, nonneg=True)
        elif key in _COUNTS:
            value = _count(value)
        elif key == "micro":
            value = _count(value, least=1)
        else:
            value = _extra(value)
        if value is not None:
            parts.append("," + _name(key) + _scalar(value))
    if n is not None:
        parts.append(',"samples":' + int.__repr__(n))
    if loss is not None:
        x = _loss(loss)
        if x is not None:
            parts.append(',"loss":' + (float.__repr__(x) if isinstance(x, float) else '"' + x + '"'))
    parts.append("}")
    line = "".join(parts).encode()
    return line + b"\n" if len(line) <= MAX_RECORD_BYTES else None
