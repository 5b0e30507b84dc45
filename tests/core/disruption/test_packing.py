"""The repack's program (`core.disruption.packing`): a packing that saves less than the minimum share of what it
retires is not proposed by the solver at all, and one that saves just above it is."""

from __future__ import annotations

import numpy as np
import pytest

from core.disruption.packing import PackingProblem, savings_bound, solve_packing

GIB = 2**30


def two_candidates_onto_one_node(percent: float) -> PackingProblem:
    """Two candidates at $0.100/h, each with one pod of 1 CPU and 1 GiB and no room to spare, and one instance type
    at $0.180/h that holds both pods: merging them saves $0.020/h, 10 % of what they cost."""
    return PackingProblem(
        requests=np.array([[1000, GIB]], dtype=np.int64),
        counts=np.array([[1, 1]], dtype=np.int64),
        price=np.array([100_000, 100_000], dtype=np.int64),
        candidate_free=np.zeros((2, 2), dtype=np.int64),
        kind=np.array([0, 1], dtype=np.int64),
        free=np.zeros((2, 2), dtype=np.int64),
        admits=np.ones((1, 2), dtype=np.bool_),
        headroom=np.array([[2000, 2 * GIB]], dtype=np.int64),
        type_price=np.array([180_000], dtype=np.int64),
        fits=np.ones((1, 1), dtype=np.bool_),
        min_savings=20_000,
        min_savings_percent=percent,
        slots=2,
    )


@pytest.mark.parametrize("percent", [0.0, 9.9, 10.0])
def test_a_packing_that_saves_the_share_is_proposed(percent: float) -> None:
    packing = solve_packing(two_candidates_onto_one_node(percent))
    assert packing is not None
    assert packing.retire == (0, 1)
    assert [t for t, _ in packing.launches] == [0]
    assert packing.savings == 20_000


def test_a_packing_that_saves_less_than_the_share_is_not_proposed() -> None:
    """The share is a constraint of the program: the solver finds no packing, rather than one the pricing would
    refuse afterwards."""
    assert solve_packing(two_candidates_onto_one_node(10.1)) is None


def test_the_bound_leaves_the_share_out() -> None:
    """No plan can save more than the bound, whatever the settings: the share does not lower it."""
    bound = savings_bound(two_candidates_onto_one_node(50.0))
    assert bound == (20_000, True)
