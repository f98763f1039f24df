from __future__ import annotations

import pytest

from hangar.redact import MASK, redact


@pytest.mark.parametrize(
    "secret",
    [
        "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
        "sk-proj-abcdefghijklmnopqrstuvwx",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "AKIAABCDEFGHIJKLMNOP",
        "xoxb-1234567890-abcdefghij",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    ],
)
def test_known_secret_shapes_are_masked(secret: str) -> None:
    text = f"I used {secret} to call the API."
    assert redact(text) == f"I used {MASK} to call the API."


def test_secret_looking_assignments_are_masked_but_their_names_kept() -> None:
    assert redact("export API_KEY=abcd1234 and DB_PASSWORD: 'hunter22'") == (
        f"export API_KEY={MASK} and DB_PASSWORD: '{MASK}'"
    )


def test_ordinary_text_is_left_alone() -> None:
    text = "Fixed the CSV export; 12 tests pass. See src/export.py line 40."
    assert redact(text) == text
    assert redact(None) is None
