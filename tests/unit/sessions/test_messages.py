"""Where a message is kept (:mod:`hangar.sessions.messages`): on the records up to 64 KiB of
UTF-8, sealed in blobs one byte above, never in clear there; and, through the service with the
Antigravity stand-in, a sealed message reaches the agent whole, reads back whole, leaves nothing
behind when its request fails, and goes with its session."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.errors import DecryptionFailed, InvalidInput, NameTaken
from hangar.keys.local import LocalKeys
from hangar.harnesses.handoff import MARKER
from hangar.models import SessionState, TurnOutcome
from hangar.sessions.messages import INLINE_BYTES, OPENING_CHARS, MessageStore
from tests.unit.sessions.world import World

MARK = "the-secret-plan-7f3a"


def stored_files(blobs: LocalBlobs) -> dict[str, bytes]:
    return {key: blobs.get(key) for key in blobs.list("")}


def test_a_message_of_64_kib_stays_on_the_records_and_one_byte_more_is_sealed(
    blobs: LocalBlobs, keys: LocalKeys
) -> None:
    store = MessageStore(blobs, keys)
    at_limit = "é" * (INLINE_BYTES // 2)  # 64 KiB of UTF-8, half as many characters
    assert len(at_limit.encode()) == INLINE_BYTES
    kept = store.keep("ses_a", 1, at_limit)
    assert (kept.message, kept.ref) == (at_limit, None)
    assert blobs.list("") == []

    over = at_limit + "!"
    sealed = store.keep("ses_a", 2, over)
    assert sealed.ref is not None and sealed.ref.size == INLINE_BYTES + 1
    assert sealed.message == over[:OPENING_CHARS]
    assert blobs.list("") == [sealed.ref.blob]
    assert sealed.ref.blob.startswith("sessions/ses_a/messages/2-")
    assert store.text(sealed.message, sealed.ref) == over
    assert store.text(kept.message, kept.ref) == at_limit


def test_a_sealed_message_is_not_readable_in_the_blob_store(
    blobs: LocalBlobs, keys: LocalKeys, tmp_path: Path
) -> None:
    store = MessageStore(blobs, keys)
    message = (MARK + " ") * 10_000
    kept = store.keep("ses_a", 1, message)
    assert kept.ref is not None
    on_disk = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert len(on_disk) > len(message)  # the sealed blob is there...
    assert MARK.encode() not in on_disk  # ...and says nothing in clear
    for blob in stored_files(blobs).values():
        assert MARK.encode() not in blob


def test_a_sealed_message_read_under_another_turns_name_or_altered_fails(
    blobs: LocalBlobs, keys: LocalKeys
) -> None:
    store = MessageStore(blobs, keys)
    one = store.keep("ses_a", 1, "a" * (INLINE_BYTES + 1))
    two = store.keep("ses_a", 2, "b" * (INLINE_BYTES + 1))
    assert one.ref is not None and two.ref is not None
    blobs.put(two.ref.blob, blobs.get(one.ref.blob))  # swapped in from another turn
    with pytest.raises(DecryptionFailed):
        store.text(two.message, two.ref)
    sealed = bytearray(blobs.get(one.ref.blob))
    sealed[-1] ^= 1
    blobs.put(one.ref.blob, bytes(sealed))
    with pytest.raises(DecryptionFailed):
        store.text(one.message, one.ref)


def test_two_requests_for_one_turn_seal_apart_and_release_only_their_own(
    blobs: LocalBlobs, keys: LocalKeys
) -> None:
    store = MessageStore(blobs, keys)
    winner = store.keep("ses_a", 3, "w" * (INLINE_BYTES + 1))
    loser = store.keep("ses_a", 3, "l" * (INLINE_BYTES + 1))
    assert winner.ref is not None and loser.ref is not None
    assert winner.ref.blob != loser.ref.blob
    store.release(loser)
    assert blobs.list("") == [winner.ref.blob]
    assert store.text(winner.message, winner.ref) == "w" * (INLINE_BYTES + 1)
    store.delete_all("ses_a")
    assert blobs.list("") == []


def agent_prompts(world: World, name: str) -> list[str]:
    """The prompts the stand-in stored in its conversations (hangar's note taken out)."""
    out = io.BytesIO()
    script = ("import glob, json, os, sqlite3, sys\n"
              "folder = os.path.expanduser('~/.gemini/antigravity-cli/conversations')\n"
              "json.dump([t for db in sorted(glob.glob(folder + '/*.db')) for (t,) in\n"
              "           sqlite3.connect(db).execute(\"SELECT text FROM messages WHERE\"\n"
              "                                       \" role = 'user' ORDER BY rowid\")],\n"
              "          sys.stdout)")  # fmt: skip
    assert world.service.exec(name, ["python3", "-c", script], stdout=out, agent=True) == 0
    return list(json.loads(out.getvalue()))


@pytest.mark.sandbox
def test_a_message_over_64_kib_is_sealed_on_every_record_and_reaches_the_agent_whole(
    world: World,
) -> None:
    service = world.service
    message = f"- {MARK}: do this\n" + "- and then «this», `$(x)`\n" * 3000  # ~80 KB
    assert len(message.encode()) > INLINE_BYTES
    started = service.new("big", message, "app", harness="antigravity")
    session = world.db.get_session(started.session.id)
    assert session.start is not None and session.start.message_ref is not None
    assert session.start.message == message[:OPENING_CHARS]
    record = world.db.get_turn(session.id, 1)
    assert record.message_ref == session.start.message_ref
    assert len(record.model_dump_json()) < INLINE_BYTES

    turn = service.wait("big", timeout=60, poll=0.05)
    assert turn.outcome is TurnOutcome.EXITED, turn
    assert turn.message == message
    assert [t.message for t in service.get("big").turns] == [message]
    assert agent_prompts(world, "big") == [message.rstrip()]  # the stand-in strips the note

    # a fork on a harness that cannot fork hands off: the account quotes the opening of the
    # first message, and the fork's own sealed message follows it whole
    [asked] = service.fork("big", 1)
    assert world.settle(asked.name).state is SessionState.IDLE
    second = "- then this, on the fork\n" + "- and «this» too\n" * 5000
    service.send(asked.name, second)
    assert service.wait(asked.name, timeout=60, poll=0.05).outcome is TurnOutcome.EXITED
    [handoff] = [p for p in agent_prompts(world, asked.name) if p.startswith(MARKER)]
    assert handoff.endswith("Now the next request:\n" + second.rstrip())
    assert f"Original task: - {MARK}: do this" in handoff and " [...]" in handoff
    assert len(handoff) < len(second) + 8000  # the account quotes, it does not copy

    blob = session.start.message_ref.blob
    assert world.blobs.list(f"sessions/{session.id}/messages/") == [blob]
    service.delete("big")
    # What is left is only the chunks its fork's checkpoints share, until the fork goes too.
    left = world.blobs.list(f"sessions/{session.id}/")
    shared = {p for c in world.db.list_checkpoints(asked.id) for p in c.packs}
    assert left and set(left) <= shared
    service.delete(asked.name)
    assert world.blobs.list(f"sessions/{session.id}/") == []


@pytest.mark.sandbox
def test_a_refused_request_leaves_no_sealed_message_behind(world: World) -> None:
    service = world.service
    service.new("taken", "hello", "app", harness="antigravity")
    with pytest.raises(NameTaken):
        service.new("taken", "x" * (INLINE_BYTES + 1), "app", harness="antigravity")
    assert [k for k in world.blobs.list("") if "/messages/" in k] == []


@pytest.mark.sandbox
def test_a_message_that_is_not_text_is_refused_and_nothing_is_stored(world: World) -> None:
    """A lone surrogate (a str can hold one, no UTF-8 can: no record, no agent's standard
    input) is a clear invalid_input at the service, whichever surface asked, before anything
    is stored."""
    service = world.service
    with pytest.raises(InvalidInput, match="lone surrogate") as refused:
        service.new("odd", "fix \ud800 this", "app", harness="antigravity")
    assert refused.value.data.get("field") == "message"
    assert world.db.list_sessions() == [] and world.blobs.list("") == []
