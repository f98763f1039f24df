"""Format-2 checkpoints (content-addressed chunks) through real sandboxes: what each one
stores, that it restores, and that what it stores is bound to its session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import DecryptionFailed, NoUsableCheckpoint
from hangar.keys.local import LocalKeys
from hangar.models import Checkpoint, CheckpointReason
from hangar.sandboxes.local import LocalSandboxes
from hangar.checkpoints.chunked import open_manifest
from hangar.checkpoints import chunks
from hangar.checkpoints.chunks import ChunkReader, packs_prefix
from tests.rig import Engine, make_engine
from tests.unit.checkpoints.test_checkpoints import CONVERSATION, STATE, TURN_ONE

EngineWith = Callable[..., Engine]


@pytest.fixture
def engine_with(
    settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
    sandboxes: LocalSandboxes, remote: Path,
) -> EngineWith:  # fmt: skip
    def make(name: str = "demo", **changes: Any) -> Engine:
        return make_engine(settings.replace(**changes), db, blobs, keys, sandboxes, remote,
                           name=name)  # fmt: skip

    return make


@pytest.fixture
def engine(engine_with: EngineWith) -> Engine:
    return engine_with(session_keep_checkpoints=10)


BIG = """
mkdir -p data && head -c 1500000 /dev/urandom > data/big.bin
for i in $(seq 1 40); do echo "note $i" > data/note-$i.txt; done
python3 - <<'PY'
import json, os
path = os.path.expanduser("~/.claude/projects/-workspace-app/conv.jsonl")
with open(path, "a") as out:
    for i in range(3000):
        out.write(json.dumps({"role": "assistant", "turn": i, "text": "x" * 100}) + "\\n")
PY
"""


def stored_bytes(blobs: LocalBlobs, session_id: str) -> int:
    return sum(len(blobs.get(key)) for key in blobs.list(f"sessions/{session_id}/"))


def new_bytes(engine: Engine, work: Callable[[], Checkpoint]) -> tuple[Checkpoint, int]:
    """The checkpoint ``work`` takes, and the bytes it added to the session's blobs."""
    before = stored_bytes(engine.blobs, engine.session.id)
    checkpoint = work()
    return checkpoint, stored_bytes(engine.blobs, engine.session.id) - before


def restore_state(engine: Engine, checkpoint_id: str | None = None) -> str:
    sandbox, workspace = engine.sandbox()
    report = engine.restorer.restore(engine.session.id, sandbox, workspace.repo_dir)
    assert report is not None and not report.fell_back
    if checkpoint_id is not None:
        assert report.checkpoint.id == checkpoint_id
    return engine.sh(sandbox, STATE + "\nsha256sum data/big.bin data/note-7.txt")


@pytest.fixture
def started(engine: Engine) -> tuple[str, Any, Checkpoint, int]:
    """A sandbox after a first turn with a 1.5 MB untracked file, 40 small ones and a 330 KB
    conversation; its first checkpoint and the bytes that stored."""
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, TURN_ONE + BIG)
    first, size = new_bytes(engine, lambda: engine.take(sandbox, workspace))
    return sandbox, workspace, first, size


def test_a_checkpoint_is_one_sealed_manifest_over_packs_holding_no_plaintext(
    engine: Engine, started: tuple[str, Any, Checkpoint, int]
) -> None:
    sandbox, workspace, first, size = started
    assert first.format == 2 and [p.name for p in first.parts] == ["manifest"]
    assert first.uses == [engine.session.id] and first.source is None
    packs = engine.blobs.list(packs_prefix(engine.session.id))
    assert first.packs == packs and 1 <= len(packs) <= 64
    assert size > 1_800_000 and first.written > 1_800_000
    for key in engine.blobs.list(f"sessions/{engine.session.id}/"):
        data = engine.blobs.get(key)
        assert b"tangerine" not in data and b"uncommitted line" not in data and b"note 7" not in data
    names = {p.name for p in open_manifest(engine.checkpointer.parts, first).parts}
    assert names == {"meta.json", "repo.bundle", "wip.patch", "untracked", "agent", "session.patch"}


def test_everything_survives_destroy_and_restore(
    engine: Engine, started: tuple[str, Any, Checkpoint, int]
) -> None:
    sandbox, workspace, first, _ = started
    before = engine.sh(sandbox, STATE + "\nsha256sum data/big.bin data/note-7.txt")
    engine.sandboxes.destroy(sandbox)
    assert restore_state(engine, first.id) == before


def test_a_one_line_edit_stores_about_its_own_bytes_and_restores(
    engine: Engine, started: tuple[str, Any, Checkpoint, int]
) -> None:
    sandbox, workspace, first, first_size = started
    engine.sh(sandbox, "echo 'one more line' >> README.md")
    second, size = new_bytes(engine, lambda: engine.take(sandbox, workspace))
    assert second.source == first.id and second.source_session == engine.session.id
    assert size <= 64 * 1024, f"a one-line edit stored {size} bytes"
    assert second.written < 64 * 1024
    before = engine.sh(sandbox, STATE + "\nsha256sum data/big.bin data/note-7.txt")
    engine.sandboxes.destroy(sandbox)
    assert restore_state(engine, second.id) == before


def test_an_append_to_the_conversation_stores_only_its_last_blocks(
    engine: Engine, started: tuple[str, Any, Checkpoint, int]
) -> None:
    sandbox, workspace, first, _ = started
    engine.sh(sandbox, f"echo '{{\"role\": \"user\", \"content\": \"and now plums\"}}' >> ~/{CONVERSATION}")
    second, size = new_bytes(engine, lambda: engine.take(sandbox, workspace))
    assert size <= 64 * 1024 + 16 * 1024, f"an append stored {size} bytes"
    manifest = open_manifest(engine.checkpointer.parts, second)
    agent = manifest.part("agent")
    assert agent is not None
    conv = next(e for e in agent.entries if e.path.endswith(b"conv.jsonl"))
    data = b"".join(ChunkReader(engine.blobs).read([manifest.chunks[c] for c in conv.chunks]))
    assert data.endswith(b'"and now plums"}\n') and len(conv.chunks) >= 5


def test_a_new_untracked_file_stores_its_own_chunks(
    engine: Engine, started: tuple[str, Any, Checkpoint, int]
) -> None:
    sandbox, workspace, first, _ = started
    engine.sh(sandbox, "head -c 200000 /dev/urandom > data/fresh.bin")
    second, size = new_bytes(engine, lambda: engine.take(sandbox, workspace))
    # 200,000 bytes of its own (twice: the file, and its section of the session patch, base85)
    assert 200_000 < size < 200_000 * 2.5 + 64 * 1024


def test_a_file_changed_with_its_size_and_mtime_kept_is_stored_again(
    engine: Engine, started: tuple[str, Any, Checkpoint, int]
) -> None:
    sandbox, workspace, first, _ = started
    engine.sh(sandbox, """
        stamp=$(stat -c %y data/note-7.txt)
        printf 'note X\\n' > data/note-7.txt
        touch -d "$stamp" data/note-7.txt
    """)
    second = engine.take(sandbox, workspace)
    assert second.source == first.id
    engine.sandboxes.destroy(sandbox)
    restored = restore_state(engine, second.id)
    assert "note-7.txt" in restored
    manifest = open_manifest(engine.checkpointer.parts, second)
    untracked = manifest.part("untracked")
    assert untracked is not None
    entry = next(e for e in untracked.entries if e.path == b"data/note-7.txt")
    assert b"".join(ChunkReader(engine.blobs).read([manifest.chunks[c] for c in entry.chunks])) == b"note X\n"


def test_nothing_changed_stores_only_the_small_root(
    engine: Engine, started: tuple[str, Any, Checkpoint, int]
) -> None:
    sandbox, workspace, first, _ = started
    second, size = new_bytes(engine, lambda: engine.take(sandbox, workspace))
    assert second.written == 0 and size < 8 * 1024


def test_a_chunk_moved_from_another_session_fails_to_decrypt(
    engine_with: EngineWith,
) -> None:
    one, two = engine_with("one"), engine_with("two")
    for engine in (one, two):
        sandbox, workspace = engine.sandbox()
        engine.sh(sandbox, TURN_ONE)
        engine.take(sandbox, workspace)
    theirs = one.db.list_checkpoints(one.session.id)[-1]
    ours = two.db.list_checkpoints(two.session.id)[-1]
    their_ref = next(iter(open_manifest(one.checkpointer.parts, theirs).chunks.values()))
    # Copy their sealed chunk over one of ours, at our offset, in our pack.
    manifest = open_manifest(two.checkpointer.parts, ours)
    our_ref = next(r for r in manifest.chunks.values() if r.length == their_ref.length) \
        if any(r.length == their_ref.length for r in manifest.chunks.values()) else None
    sealed = two.blobs.read_range(their_ref.pack, their_ref.offset, their_ref.length)
    moved = their_ref.model_copy(update={"owner": two.session.id, "pack": ours.packs[0]})
    with pytest.raises(DecryptionFailed):
        list(ChunkReader(two.blobs).read([moved]))  # another owner in the associated data
    if our_ref is not None:
        pack = bytearray(two.blobs.get(our_ref.pack))
        pack[our_ref.offset:our_ref.offset + our_ref.length] = sealed
        two.blobs.put(our_ref.pack, bytes(pack))
        with pytest.raises(DecryptionFailed):
            list(ChunkReader(two.blobs).read([our_ref]))


def test_a_missing_pack_makes_every_checkpoint_using_it_fall_back_and_say_so(
    engine: Engine, started: tuple[str, Any, Checkpoint, int]
) -> None:
    sandbox, workspace, first, _ = started
    engine.sh(sandbox, "echo 'one more line' >> README.md")
    second = engine.take(sandbox, workspace)
    shared = sorted(set(first.packs) & set(second.packs))
    assert shared, "the second checkpoint reuses the first one's chunks"
    engine.blobs.delete(shared[0])
    fresh, workspace = engine.sandbox()
    with pytest.raises(NoUsableCheckpoint) as failure:
        engine.restorer.restore(engine.session.id, fresh, workspace.repo_dir)
    assert {f["checkpoint_id"] for f in failure.value.data["failures"]} == {first.id, second.id}


def test_a_format_1_checkpoint_restores_and_the_next_one_is_format_2(
    engine_with: EngineWith,
) -> None:
    old = engine_with(checkpoint_format=1)
    sandbox, workspace = old.sandbox()
    old.sh(sandbox, TURN_ONE + BIG)
    before = old.sh(sandbox, STATE + "\nsha256sum data/big.bin data/note-7.txt")
    legacy = old.take(sandbox, workspace)
    assert legacy.format == 1
    new = Engine(**{**old.__dict__, "checkpointer": type(old.checkpointer)(
        old.db, old.blobs, old.checkpointer.parts.keys, old.sandboxes,
        old.checkpointer.settings.replace(checkpoint_format=2))})  # fmt: skip
    old.sandboxes.destroy(sandbox)
    assert restore_state(new, legacy.id) == before
    sandbox, workspace = new.sandbox()
    report = new.restorer.restore(new.session.id, sandbox, workspace.repo_dir)
    assert report is not None and report.checkpoint.id == legacy.id
    chunked = new.take(sandbox, workspace)
    assert chunked.format == 2 and chunked.source is None  # nothing to reuse from format 1
    engine_after = new.take(sandbox, workspace)
    assert engine_after.source == chunked.id and engine_after.written == 0


def test_pruning_sweeps_the_packs_no_kept_checkpoint_lists(
    engine_with: EngineWith, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunks, "PACK_TARGET", 256 * 1024)  # the big file in packs of its own
    engine = engine_with(session_keep_checkpoints=1)
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, TURN_ONE + BIG)
    first = engine.take(sandbox, workspace)
    engine.sh(sandbox, "rm -rf data && echo 'x' > small.txt")
    second = engine.take(sandbox, workspace)
    assert [c.id for c in engine.db.list_checkpoints(engine.session.id)] == [second.id]
    assert set(engine.blobs.list(packs_prefix(engine.session.id))) == set(second.packs)
    assert set(first.packs) - set(second.packs), "the big file's pack went with the first"
    assert stored_bytes(engine.blobs, engine.session.id) < first.written - 1_500_000
    engine.checkpointer.drop_all(engine.session.id)
    assert engine.blobs.list(f"sessions/{engine.session.id}/") == []


def test_a_fork_reuses_its_parents_chunks_and_keeps_them_alive(
    engine_with: EngineWith, db: SqliteDb,
) -> None:
    parent = engine_with("parent", session_keep_checkpoints=1)
    sandbox, workspace = parent.sandbox()
    parent.sh(sandbox, TURN_ONE + BIG)
    point = parent.take(sandbox, workspace)
    child = engine_with("child", session_keep_checkpoints=1)
    db.update_session(child.session.model_copy(update={"forked_from": parent.session.id}))
    fork_sandbox, fork_workspace = child.sandbox()
    child.restorer.restore_checkpoint(point, fork_sandbox, fork_workspace.repo_dir)
    target = child.target(fork_sandbox, fork_workspace)
    target = type(target)(**{**target.__dict__, "fork_of": (parent.session.id, point.id)})
    taken = child.checkpointer.take(target, CheckpointReason.MANUAL)
    assert taken is not None and taken.source == point.id
    assert taken.source_session == parent.session.id
    assert parent.session.id in taken.uses and taken.written < 64 * 1024
    # The parent moves on and is deleted: the chunks the fork uses stay.
    parent.sh(sandbox, "rm -rf data")
    parent.take(sandbox, workspace)
    parent.checkpointer.drop_all(parent.session.id)
    kept = set(child.blobs.list(packs_prefix(parent.session.id)))
    assert kept and kept <= set(taken.packs)
    fresh, again = child.sandbox()
    report = child.restorer.restore(child.session.id, fresh, again.repo_dir)
    assert report is not None and report.checkpoint.id == taken.id and not report.fell_back
    assert "note 7" in child.sh(fresh, "cat data/note-7.txt")
    child.checkpointer.drop_all(child.session.id)
    assert child.blobs.list(packs_prefix(parent.session.id)) == []


def test_a_chunk_altered_in_its_pack_fails_the_restore_before_the_sandbox_changes(
    engine: Engine, started: tuple[str, Any, Checkpoint, int]
) -> None:
    sandbox, workspace, first, _ = started
    manifest = open_manifest(engine.checkpointer.parts, first)
    agent = manifest.part("agent")
    assert agent is not None
    last = manifest.chunks[agent.entries[-1].chunks[-1]]  # the last chunk the restore streams
    pack = bytearray(engine.blobs.get(last.pack))
    pack[last.offset + last.length - 1] ^= 1
    engine.blobs.put(last.pack, bytes(pack))
    fresh, again = engine.sandbox()
    state = "find . ~ -path ./.git -prune -o -printf '%p %y %s\\n' | sort; git status --porcelain"
    before = engine.sh(fresh, state)
    with pytest.raises(NoUsableCheckpoint) as failure:
        engine.restorer.restore(engine.session.id, fresh, again.repo_dir)
    assert failure.value.data["failures"][0]["code"] == DecryptionFailed.code
    assert engine.sh(fresh, state) == before


def test_untracked_files_whose_patch_would_pass_the_limit_skip_it_without_making_it(
    engine_with: EngineWith,
) -> None:
    engine = engine_with(exchange_max_patch_mb=1)
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "head -c 1500000 /dev/urandom > noise.bin && echo 'a note' > note.txt")
    checkpoint = engine.take(sandbox, workspace)
    contents = engine.checkpointer.contents(checkpoint)
    assert not contents.has("session.patch") and contents.has("untracked")
    [warning] = [w for w in checkpoint.warnings if w.startswith("session.patch skipped")]
    assert "of patch (estimated), over the 1048576-byte patch limit" in warning
    # Small enough again: the patch is made.
    engine.sh(sandbox, "rm noise.bin")
    smaller = engine.take(sandbox, workspace)
    patch = b"".join(engine.checkpointer.contents(smaller).read("session.patch"))
    assert b"+a note\n" in patch


def test_the_chunks_still_used_in_a_mostly_unused_pack_move_so_that_the_pack_can_go(
    engine_with: EngineWith,
) -> None:
    engine = engine_with(session_keep_checkpoints=1)
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, TURN_ONE + BIG)
    first = engine.take(sandbox, workspace)  # one pack: the big file and everything else
    engine.sh(sandbox, "rm -rf data")  # most of it is no longer needed
    before = engine.sh(sandbox, STATE)
    second = engine.take(sandbox, workspace)
    assert not set(first.packs) & set(second.packs), "what it still needed moved out"
    assert engine.blobs.list(packs_prefix(engine.session.id)) == sorted(second.packs)
    assert stored_bytes(engine.blobs, engine.session.id) < first.written / 2
    third = engine.take(sandbox, workspace)  # nothing changed: nothing moves again
    assert third.written == 0 and third.source == second.id
    engine.sandboxes.destroy(sandbox)
    fresh, again = engine.sandbox()
    report = engine.restorer.restore(engine.session.id, fresh, again.repo_dir)
    assert report is not None and report.checkpoint.id == third.id and not report.fell_back
    assert engine.sh(fresh, STATE) == before


def test_the_agent_can_neither_read_nor_plant_the_stat_cache(
    engine: Engine, started: tuple[str, Any, Checkpoint, int]
) -> None:
    sandbox, workspace, first, _ = started
    as_agent = engine.sandboxes.exec
    for probe in ("ls /hangar/tmp", "cat /hangar/tmp/stat-cache.json",
                  "echo '{}' > /hangar/tmp/stat-cache.json"):
        result = as_agent(sandbox, ["sh", "-c", probe])
        assert not result.ok and b"Permission denied" in result.stderr, probe
    # Checkpoints go on as before, seeing its edits.
    engine.sh(sandbox, "echo more >> data/note-9.txt")
    assert engine.take(sandbox, workspace).written > 0
