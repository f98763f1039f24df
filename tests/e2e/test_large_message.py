"""A message as large as HANGAR_MAX_MESSAGE_KB allows (1 MiB of UTF-8), piped into ``hangar
session new -``, reaches the real Claude Code byte for byte (the model stub's request log shows
it) and reads back whole with ``session get``: on the embedded backends, and on the cloud ones,
where a Firestore document holds at most 1 MiB and the records therefore hold a reference to the
message sealed in blobs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.model import ModelStub
from tests.e2e.conftest import HANGAR, Server
from tests.e2e.test_acceptance import MODELS, add_env
from tests.harness.test_messages import user_texts

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e, pytest.mark.harness]

LIMIT = 1 << 20  # HANGAR_MAX_MESSAGE_KB's default, in bytes


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub({"rules": [], "models": [MODELS["claude"]]}) as running:
        yield running


def message_of(size: int) -> str:
    """A message of exactly ``size`` bytes of UTF-8 in every shape that broke before: a
    leading blank line and dash, an option's name, quotes and shell characters, non-ASCII,
    CRLF, trailing blank lines."""
    head = "\n- fix the typo\n--help\r\nit's \"quoted\" `$(touch x)` ; | & $HOME\ncafé 東京 🚀\n"
    line = "- and then the next item of the long task, «as written»\n"
    tail = "the end\n\n\n"
    body = head + line * ((size - len((head + tail).encode())) // len(line.encode()))
    pad = size - len((body + tail).encode())
    text = body + "x" * pad + tail
    assert len(text.encode()) == size
    return text


def test_a_1_mib_message_from_stdin_reaches_claude_code_byte_for_byte_and_reads_back_whole(
    real_server: Server, remote: Path, stub: ModelStub
) -> None:
    server = real_server
    add_env(server, remote, stub)
    message = message_of(LIMIT)
    done = subprocess.run(
        [HANGAR, "session", "new", "big", "-", "--env", "app", "--harness", "claude",
         "--model", MODELS["claude"], "-w"],
        input=message.encode(), env=server.env(), capture_output=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    sent = [s for r in stub.requests("anthropic") for s in user_texts(r["body"])]
    # the message, then hangar's note on $HANGAR_IO (the exchange), in one text
    assert any(s.startswith(message + "\n\n<hangar-exchange>") for s in sent), [
        (len(s), s[:60]) for s in sent]  # fmt: skip
    turns = json.loads(server.ok("session", "get", "big", "--json"))["turns"]
    assert [(t["message"], t["outcome"]) for t in turns] == [(message, "exited")]

    over = subprocess.run([HANGAR, "session", "send", "big", "-"], input=(message + "!").encode(),
                          env=server.env(), capture_output=True, timeout=60)  # fmt: skip
    assert over.returncode != 0 and b"message_too_large" in over.stderr
