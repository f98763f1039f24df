"""What every db backend shares: the range a name prefix is."""

from __future__ import annotations

import pytest

from hangar.db.records import prefix_end

LAST = chr(0x10FFFF)


@pytest.mark.parametrize(
    ("prefix", "end"),
    [("ab", "ac"), ("a-", "a."), ("z", "{"), ("a" + LAST, "b"), ("\ud7ff", "\ue000"),
     ("\uf8ff", "\uf900"), ("", None), (LAST * 2, None)],
)  # fmt: skip
def test_a_prefix_ends_at_the_first_string_after_every_one_that_starts_with_it(
    prefix: str, end: str | None
) -> None:
    assert prefix_end(prefix) == end


def test_exactly_the_strings_that_start_with_a_prefix_lie_in_its_range() -> None:
    words = ["a", "ab", "ab-1", "ab" + LAST, "ab\U0001f600", "ab\uf8ff", "aba", "abz", "ac",
             "aB", "b", "a" + LAST, "a" + LAST + "x", LAST]  # fmt: skip
    for prefix in ["ab", "a", "a" + LAST, LAST, "aB", "abz"]:
        end = prefix_end(prefix)
        inside = [w for w in words if prefix <= w and (end is None or w < end)]
        assert inside == [w for w in words if w.startswith(prefix)], prefix
