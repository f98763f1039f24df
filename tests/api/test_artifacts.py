"""Artifacts over REST whatever their names, with a real sandbox and the Antigravity stand-in:
a name that is not ASCII downloads with an RFC 6266 header, and a name holding CR, LF or ESC is
refused when the turn's handback is stored (a warning naming it readably), never a 404 later."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, unquote

import pytest
from starlette.testclient import TestClient

from tests.api.conftest import add_env, new_session, settle, wait_turn

pytestmark = pytest.mark.sandbox

UNICODE = "résumé-日本.txt"
TURN = ('run: mkdir -p "$HANGAR_IO/out/artifacts" && cd "$HANGAR_IO/out/artifacts" && '
        f"printf one > '{UNICODE}' && printf two > \"$(printf 'cr\\r\\nlf.txt')\" && "
        "printf three > \"$(printf 'esc\\033]0;owned\\007.txt')\" && printf four > plain.txt\n"
        "run: hangar-agent done 'Handed back.'")  # fmt: skip


def test_artifacts_download_with_any_name_and_control_characters_are_refused_when_stored(
    api: TestClient, remote: Path
) -> None:
    add_env(api, remote)
    new_session(api, "arts", TURN)
    settle(api, "arts")
    turn = wait_turn(api, "arts", 1)
    assert turn["outcome"] == "exited", turn
    assert "out/artifacts/cr\\x0d\\x0alf.txt: a name with control characters; skipped" in (
        turn["warnings"])  # fmt: skip
    assert "out/artifacts/esc\\x1b]0;owned\\x07.txt: a name with control characters; skipped" in (
        turn["warnings"])  # fmt: skip

    listed = api.get("/api/sessions/arts/artifacts").json()
    assert [a["path"] for a in listed] == ["plain.txt", UNICODE]

    got = api.get(f"/api/sessions/arts/artifacts/1/{quote(UNICODE)}")
    assert (got.status_code, got.content) == (200, b"one")
    disposition = got.headers["content-disposition"]
    assert disposition.isascii()
    fallback, exact = disposition.split("; filename*=UTF-8''")
    assert fallback == 'attachment; filename="r_sum_-__.txt"'
    assert unquote(exact) == UNICODE
    plain = api.get("/api/sessions/arts/artifacts/1/plain.txt")
    assert plain.headers["content-disposition"] == 'attachment; filename="plain.txt"'
