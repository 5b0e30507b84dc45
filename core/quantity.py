"""Exact parsing of Kubernetes resource quantities ("100m", "1.5", "1Gi", "500M", "2e3").

Quantities are parsed into `Fraction`s so that no precision is lost; callers round once, the way the
API server does (`MilliValue()` and `Value()` both round up).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_PATTERN = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?\d+)|(?P<decimal>[numkMGTPE]?))$",
    re.ASCII,  # digits are 0-9, as in Go's regular expressions: Python's \d also takes other scripts' digits
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity exactly.

    Integers and floats (as YAML may produce them) are accepted; strings follow the Kubernetes grammar:
    a signed decimal number followed by a binary suffix, a decimal suffix or a decimal exponent.
    """
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r} is a boolean, not a number")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"quantity {value!r} is not finite")
        return Fraction(str(value))
    text = value.strip()
    match = _PATTERN.match(text)
    if match is None:
        raise QuantityError(f"quantity {value!r} does not match the Kubernetes quantity format")
    number = Fraction(match["number"])
    if match["binary"] is not None:
        return number * _BINARY[match["binary"]]
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > 100:
            raise QuantityError(f"quantity {value!r} has an exponent out of range")
        return number * Fraction(10) ** exponent
    return number * _DECIMAL[match["decimal"] or ""]


def to_milli(value: str | int | float) -> int:
    """The quantity in thousandths, rounded up (Kubernetes `MilliValue`)."""
    return math.ceil(parse_quantity(value) * 1000)


def to_units(value: str | int | float) -> int:
    """The quantity in whole units, rounded up (Kubernetes `Value`)."""
    return math.ceil(parse_quantity(value))


def format_bytes(amount: int) -> str:
    """A byte count in the largest binary unit that divides it exactly ("1536Mi", "4Gi")."""
    for suffix, factor in reversed(list(_BINARY.items())):
        if amount and amount % factor == 0:
            return f"{amount // factor}{suffix}"
    return str(amount)


def format_millis(amount: int) -> str:
    """Millicores as Kubernetes prints them ("250m", "2")."""
    return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
