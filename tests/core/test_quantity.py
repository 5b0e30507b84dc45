"""Kubernetes quantities parsed exactly, and rounded up once as the API server does."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.quantity import QuantityError, format_bytes, format_millis, parse_quantity, to_milli, to_units


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Fraction(1, 10)),
        ("1.5", Fraction(3, 2)),
        ("1Gi", Fraction(2**30)),
        ("500M", Fraction(500 * 10**6)),
        ("2e3", Fraction(2000)),
        ("1E-3", Fraction(1, 1000)),
        ("+.5Ki", Fraction(512)),
        ("-1", Fraction(-1)),
        ("12Mi", Fraction(12 * 2**20)),
        ("3n", Fraction(3, 10**9)),
        ("0.1k", Fraction(100)),
        (2, Fraction(2)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parse_is_exact(text: str | int | float, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["1x", "", "Gi", "1.2.3", "1 Gi", "1e", "1ki", "--1", "1e1000", "\u0661\u0662", "1e\u0663"]
)
def test_malformed_quantities_are_refused_with_the_text(text: str) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(text)


def test_booleans_and_infinities_are_not_quantities() -> None:
    with pytest.raises(QuantityError):
        parse_quantity(True)
    with pytest.raises(QuantityError):
        parse_quantity(float("inf"))


@pytest.mark.parametrize(
    ("text", "milli", "units"),
    [("100m", 100, 1), ("1.5", 1500, 2), ("1", 1000, 1), ("0.0001", 1, 1), ("1Ki", 1024000, 1024)],
)
def test_rounding_up_like_the_api_server(text: str, milli: int, units: int) -> None:
    assert to_milli(text) == milli
    assert to_units(text) == units


def test_formatting() -> None:
    assert format_bytes(1536 * 2**20) == "1536Mi"
    assert format_bytes(4 * 2**30) == "4Gi"
    assert format_bytes(1000) == "1000"
    assert format_millis(250) == "250m"
    assert format_millis(2000) == "2"


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["m", "", "k", "Ki", "Mi", "Gi"]))
def test_integer_quantities_round_trip_through_their_suffix(number: int, suffix: str) -> None:
    factor = {"m": Fraction(1, 1000), "": 1, "k": 1000, "Ki": 1024, "Mi": 2**20, "Gi": 2**30}[suffix]
    assert parse_quantity(f"{number}{suffix}") == number * factor
