"""Round orders: shuffled, yet every arm takes every position equally often."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epbench.harness.run_config import (
    balanced_rounds,
    counterbalanced_order,
    fixed_order,
    williams_rows,
)


@given(n=st.integers(min_value=1, max_value=7), blocks=st.integers(1, 5), seed=st.integers(0, 99))
@settings(deadline=None)  # no test here is timed: Hypothesis's 200 ms default would be one
def test_every_arm_takes_every_position_equally_often(n: int, blocks: int, seed: int) -> None:
    keys = [f"arm{i}" for i in range(n)]
    rounds = n * blocks
    orders = counterbalanced_order(keys, rounds, random.Random(seed))
    assert len(orders) == rounds
    for order in orders:
        assert sorted(order) == sorted(keys)  # each round runs every arm once
    for position in range(n):
        counts = Counter(order[position] for order in orders)
        assert counts == {k: blocks for k in keys}


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_williams_design_balances_first_order_carryover(n: int) -> None:
    rows = williams_rows(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    follows = Counter((row[i], row[i + 1]) for row in rows for i in range(n - 1))
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    assert {follows[p] for p in pairs} == {len(rows) * (n - 1) // (n * (n - 1))}


def test_orders_are_shuffled_and_seeded() -> None:
    keys = ["ort", "engine", "plugin:x"]
    first = counterbalanced_order(keys, 30, random.Random(1))
    assert first == counterbalanced_order(keys, 30, random.Random(1))
    assert first != counterbalanced_order(keys, 30, random.Random(2))
    # Not one fixed rotation: the first three rounds differ between designs.
    assert len({tuple(o) for o in first}) == 6  # all 3! orders appear over 30 rounds


def test_rounds_round_up_to_whole_williams_designs() -> None:
    assert balanced_rounds(30, 3) == 30  # odd: 2n rows
    assert balanced_rounds(31, 3) == 36
    assert balanced_rounds(5, 4) == 8  # even: n rows
    assert balanced_rounds(1, 2) == 2
    assert balanced_rounds(1, 1) == 2  # one arm (A alone) still rounds to its design


def test_fixed_order_repeats_the_given_order() -> None:
    assert fixed_order(["a", "b"], 3) == [["a", "b"]] * 3


def test_arms_are_relabelled_and_rows_shuffled_per_design() -> None:
    keys = ["a", "b", "c", "d"]
    firsts = {tuple(counterbalanced_order(keys, 4, random.Random(s))[0]) for s in range(40)}
    # Relabelling alone gives every arm the first slot; row shuffles vary the rest.
    assert {f[0] for f in firsts} == set(keys)
    square = [counterbalanced_order(keys, 4, random.Random(s)) for s in range(40)]
    # 40 seeds: relabelling alone or row shuffles alone give at most 4! = 24 squares.
    assert len({tuple(map(tuple, sq)) for sq in square}) > 30
