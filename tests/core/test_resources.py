"""Resource lists as integers: CPU in millicores, everything else in whole units."""

from __future__ import annotations

import pytest

from core.quantity import QuantityError
from core.resources import format_resources, max_each, merge, min_each, parse_resources, subtract


def test_parse_uses_millicores_for_cpu_and_units_for_the_rest() -> None:
    parsed = parse_resources({"cpu": "250m", "memory": "1Gi", "nvidia.com/gpu": 1, "pods": "110"})
    assert parsed == {"cpu": 250, "memory": 2**30, "nvidia.com/gpu": 1, "pods": 110}
    assert parse_resources(None) == {}
    with pytest.raises(QuantityError):
        parse_resources({"cpu": "lots"})


def test_arithmetic_keeps_every_name() -> None:
    a, b = {"cpu": 1000, "memory": 10}, {"cpu": 500, "pods": 1}
    assert merge(a, b) == {"cpu": 1500, "memory": 10, "pods": 1}
    assert subtract(a, b) == {"cpu": 500, "memory": 10, "pods": -1}
    assert max_each([a, b]) == {"cpu": 1000, "memory": 10, "pods": 1}
    assert min_each([a, b]) == {"cpu": 500, "memory": 0, "pods": 0}
    assert min_each([]) == {}


def test_formatting_reads_like_kubectl() -> None:
    assert format_resources({"memory": 3 * 2**30, "cpu": 1500, "pods": 3}) == {
        "cpu": "1500m",
        "memory": "3Gi",
        "pods": "3",
    }
