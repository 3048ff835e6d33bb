"""The per-worker counter that splits each claim batch among the tiers (DESIGN §4 rule 3;
docs/concepts/priorities.md): of every ten consecutive claims, one is reserved for the
normal tier and one for the low tier, however the claims are cut into batches."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from venturi.worker.fairness import Fairness

batch_sizes = st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=60)


def reservations(batches: list[int]) -> list[tuple[int, int, int]]:
    """(batch size, reserved normal, reserved low) of each batch, every claim taken."""
    fairness = Fairness()
    out = []
    for size in batches:
        low, normal = fairness.split(size)  # the order of ClaimRequest.reservations()
        out.append((size, normal, low))
        fairness.advance(size)
    return out


@given(batch_sizes)
def test_any_run_of_consecutive_claims_reserves_a_tenth_for_each_lower_tier(
        batches: list[int]) -> None:
    """Over any stretch of whole batches of T claims, each lower tier is reserved
    floor(T/10) or ceil(T/10) of them: exactly 10 of any 100, wherever the stretch
    starts, so tier 0 keeps the other 80 when every tier has work."""
    split = reservations(batches)
    for start in range(len(split)):
        claims = normal = low = 0
        for size, n, lo in split[start:]:
            claims, normal, low = claims + size, normal + n, low + lo
            for reserved in (normal, low):
                assert claims // 10 <= reserved <= math.ceil(claims / 10), (start, split)
            if claims >= 10:
                assert claims - normal - low >= claims / 2


@given(batch_sizes)
def test_a_batch_never_reserves_more_than_its_size_and_split_changes_nothing(
        batches: list[int]) -> None:
    fairness = Fairness()
    for size in batches:
        first = fairness.split(size)
        assert fairness.split(size) == first  # asking is free: only advance() moves on
        assert 0 <= first[0] + first[1] <= size
        fairness.advance(size)


@given(st.integers(min_value=0, max_value=9))
def test_ten_claims_reserve_one_each_from_any_position(offset: int) -> None:
    fairness = Fairness()
    fairness.advance(offset)
    assert fairness.split(10) == (1, 1)
    assert fairness.split(0) == (0, 0)


def test_short_claims_move_the_counter_by_what_was_claimed() -> None:
    """A batch that came back short (less work than slots) moves the counter only by the
    claims made, so the next batch starts where the last claim ended."""
    fairness = Fairness()
    assert fairness.split(4) == (1, 0)  # (low, normal): positions 0-3: 0 is the low tier's
    fairness.advance(2)  # two claimed
    assert fairness.split(4) == (0, 1)  # positions 2-5: 5 is the normal tier's
    fairness.advance(0)
    assert fairness.split(4) == (0, 1)
    fairness.advance(4)
    assert fairness.split(5) == (1, 0)  # positions 6-10: 10 is the low tier's again
