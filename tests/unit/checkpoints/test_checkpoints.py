"""The checkpoint/restore engine on real git repos in real bubblewrap sandboxes."""

from __future__ import annotations

import io
from collections.abc import Callable
import json
import tarfile
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import BackendError, CheckpointError, NoUsableCheckpoint, UnsafeArchive
from hangar.keys.local import LocalKeys
from hangar.models import Checkpoint, CheckpointReason
from hangar.sandboxes import HANGAR_TMP, SandboxInfo, SandboxUser
from hangar.sandboxes.policy import SandboxPolicy
from hangar.sandboxes.local import LocalSandboxes
from hangar.checkpoints.checkpointer import CheckpointTarget
from hangar.checkpoints.parts import part_key
from tests.conftest import git
from tests.rig import Engine, make_engine

pytestmark = pytest.mark.sandbox

CONVERSATION = ".claude/projects/-workspace-app/conv.jsonl"


EngineWith = Callable[..., Engine]


@pytest.fixture
def engine_with(
    settings: Settings,
    db: SqliteDb,
    blobs: LocalBlobs,
    keys: LocalKeys,
    sandboxes: LocalSandboxes,
    remote: Path,
) -> EngineWith:
    """An engine whose settings have these changes (``engine_with(session_max_part_mb=1)``),
    making format-1 checkpoints unless they say otherwise."""

    def make(**changes: Any) -> Engine:
        return make_engine(settings.replace(**{"checkpoint_format": 1, **changes}), db, blobs,
                           keys, sandboxes, remote)  # fmt: skip

    return make


@pytest.fixture
def engine(engine_with: EngineWith) -> Engine:
    """These tests hold format 1 (each part stored whole), which checkpoints made before
    format 2 keep, and HANGAR_CHECKPOINT_FORMAT=1 still makes; format 2's are in
    test_chunked_checkpoints.py."""
    return engine_with(checkpoint_format=1)


TURN_ONE = f"""
head -c 3000 /dev/urandom > logo.bin
git add logo.bin && git commit -qm "add logo"
echo 'def feature(): return 1' > feature.py
git add feature.py && git commit -qm "add feature"
echo 'an uncommitted line' >> README.md
head -c 2000 /dev/urandom > logo.bin
mkdir -p notes && echo 'untracked note' > notes/todo.txt
head -c 5000 /dev/urandom > notes/blob.bin
echo '*.log' > .gitignore && echo 'ignored' > build.log
mkdir -p ~/.claude/projects/-workspace-app
echo '{{"role": "user", "content": "remember the word tangerine"}}' > ~/{CONVERSATION}
mkdir -p ~/.claude && echo 'secret-token' > ~/.claude/.credentials.json
"""

STATE = f"""
git rev-parse HEAD
git rev-parse --abbrev-ref HEAD
git status --porcelain=v1 --untracked-files=all
sha256sum README.md logo.bin feature.py notes/todo.txt notes/blob.bin .gitignore ~/{CONVERSATION}
"""


def test_commits_changes_binaries_untracked_files_and_the_conversation_survive_destroy_and_restore(
    engine: Engine,
) -> None:
    first, workspace = engine.sandbox()
    engine.sh(first, TURN_ONE)
    before = engine.sh(first, STATE)
    checkpoint = engine.take(first, workspace)
    engine.sandboxes.destroy(first)

    second, again = engine.sandbox()
    assert again.repo_dir == workspace.repo_dir == "/workspace/app"
    report = engine.restorer.restore(engine.session.id, second, again.repo_dir)

    assert report is not None and report.checkpoint.id == checkpoint.id and not report.fell_back
    assert engine.sh(second, STATE) == before
    assert "add feature" in engine.sh(second, "git log --format=%s")
    # Credentials and ignored files are never part of a checkpoint.
    assert engine.sh(second, "ls ~/.claude/.credentials.json build.log 2>&1 || true").count(
        "No such file"
    ) == 2


def test_each_part_is_stored_sealed_and_described_on_the_record(engine: Engine) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, TURN_ONE)
    checkpoint = engine.take(sandbox, workspace)

    names = {p.name for p in checkpoint.parts}
    assert names == {
        "meta.json",
        "repo.bundle",
        "wip.patch",
        "untracked.tar.zst",
        "agent.tar.zst",
        "session.patch",
    }
    assert checkpoint.head == engine.sh(sandbox, "git rev-parse HEAD").strip()
    assert checkpoint.base == workspace.base_commit
    assert checkpoint.branch == "hangar/session/demo"
    assert checkpoint.reason is CheckpointReason.TURN
    assert checkpoint.warnings == []
    for part in checkpoint.parts:
        stored = engine.blobs.get(part_key(engine.session.id, checkpoint.id, part.name))
        assert len(stored) == part.stored_size > part.size
        assert b"tangerine" not in stored and b"uncommitted line" not in stored
    assert [c.id for c in engine.db.list_checkpoints(engine.session.id)] == [checkpoint.id]

    meta = json.loads(b"".join(engine.checkpointer.parts.read(checkpoint, "meta.json")))
    assert meta["head"] == checkpoint.head and meta["base"] == workspace.base_commit
    assert meta["compression"] == "zstd" and meta["cwd"] == "/workspace/app"
    assert meta["harness"] == "claude" and meta["harness_session"] == "conv"

    wip = b"".join(engine.checkpointer.parts.read(checkpoint, "wip.patch"))
    assert b"+an uncommitted line" in wip and b"GIT binary patch" in wip


def test_the_session_patch_turns_the_base_into_the_working_tree_untracked_files_included(
    engine: Engine, tmp_path: Path
) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, TURN_ONE)
    checkpoint = engine.take(sandbox, workspace)
    patch = b"".join(engine.checkpointer.parts.read(checkpoint, "session.patch"))

    local = tmp_path / "local"
    git(tmp_path, "clone", "-q", str(engine.remote), str(local))
    (tmp_path / "session.patch").write_bytes(patch)
    git(local, "apply", "--binary", str(tmp_path / "session.patch"))
    expected = engine.sh(sandbox, "sha256sum README.md logo.bin feature.py notes/todo.txt notes/blob.bin")
    for line in expected.splitlines():
        digest, name = line.split()
        import hashlib

        assert hashlib.sha256((local / name).read_bytes()).hexdigest() == digest


def test_the_bundle_holds_only_commits_the_remote_lacks(engine: Engine) -> None:
    sandbox, workspace = engine.sandbox()
    checkpoint = engine.take(sandbox, workspace)
    assert checkpoint.part("repo.bundle") is None, "nothing unpushed, so no bundle"

    engine.sh(sandbox, "echo x > x.txt && git add x.txt && git commit -qm one")
    with_commit = engine.take(sandbox, workspace)
    bundle = with_commit.part("repo.bundle")
    assert bundle is not None and bundle.size < 2000


def test_a_tampered_part_makes_restore_fall_back_to_the_previous_checkpoint_and_say_so(
    engine: Engine,
) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "echo first > state.txt")
    older = engine.take(sandbox, workspace)
    engine.sh(sandbox, "echo second > state.txt")
    newer = engine.take(sandbox, workspace)
    key = part_key(engine.session.id, newer.id, "untracked.tar.zst")
    sealed = bytearray(engine.blobs.get(key))
    sealed[-5] ^= 0xFF
    engine.blobs.put(key, bytes(sealed))
    engine.sandboxes.destroy(sandbox)

    fresh, again = engine.sandbox()
    report = engine.restorer.restore(engine.session.id, fresh, again.repo_dir)

    assert report is not None
    assert report.checkpoint.id == older.id and report.fell_back
    assert [(s.checkpoint_id, s.code) for s in report.skipped] == [(newer.id, "decryption_failed")]
    assert engine.sh(fresh, "cat state.txt") == "first\n"


def test_a_checkpoint_whose_head_is_missing_falls_back(engine: Engine) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "echo a > a.txt && git add a.txt && git commit -qm a")
    older = engine.take(sandbox, workspace)
    engine.sh(sandbox, "echo b > b.txt && git add b.txt && git commit -qm b")
    newer = engine.take(sandbox, workspace)
    # Without its bundle, the newer checkpoint's head exists nowhere.
    engine.db.delete_checkpoints(engine.session.id)
    stripped = newer.model_copy(
        update={"parts": [p for p in newer.parts if p.name != "repo.bundle"], "version": 0}
    )
    engine.db.record_checkpoint(older.model_copy(update={"version": 0}), keep=5)
    engine.db.record_checkpoint(stripped, keep=5)

    fresh, again = engine.sandbox()
    report = engine.restorer.restore(engine.session.id, fresh, again.repo_dir)
    assert report is not None and report.checkpoint.id == older.id
    assert report.skipped[0].code == "restore_failed"
    assert "not in the repo" in report.skipped[0].message
    assert engine.sh(fresh, "git log -1 --format=%s") == "a\n"


def test_when_no_checkpoint_restores_the_error_lists_every_failure(engine: Engine) -> None:
    sandbox, workspace = engine.sandbox()
    only = engine.take(sandbox, workspace)
    engine.blobs.delete(part_key(engine.session.id, only.id, "wip.patch"))
    with pytest.raises(NoUsableCheckpoint) as info:
        engine.restorer.restore(engine.session.id, sandbox, workspace.repo_dir)
    assert info.value.data["failures"][0]["checkpoint_id"] == only.id
    assert info.value.data["failures"][0]["code"] == "blob_not_found"


def test_a_session_without_checkpoints_restores_nothing(engine: Engine) -> None:
    sandbox, workspace = engine.sandbox()
    assert engine.restorer.restore(engine.session.id, sandbox, workspace.repo_dir) is None


def test_a_checkpoint_that_fails_in_the_sandbox_stores_nothing(engine: Engine) -> None:
    sandbox, workspace = engine.sandbox()
    target = engine.target(sandbox, workspace)
    broken = CheckpointTarget(**{**target.__dict__, "repo_dir": "/workspace/missing"})
    with pytest.raises(CheckpointError, match="checkpoint failed"):
        engine.checkpointer.take(broken, CheckpointReason.MANUAL)
    assert engine.blobs.list() == []
    assert engine.db.list_checkpoints(engine.session.id) == []


def test_a_checkpoint_that_fails_to_record_deletes_the_parts_it_stored(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, TURN_ONE)

    def refuse(checkpoint: Checkpoint, keep: int) -> list[Checkpoint]:
        assert engine.blobs.list(), "parts are stored before the record"
        raise OSError("disk full")

    monkeypatch.setattr(engine.db, "record_checkpoint", refuse)
    with pytest.raises(OSError):
        engine.checkpointer.take(engine.target(sandbox, workspace), CheckpointReason.TURN)
    assert engine.blobs.list() == []


def test_recording_prunes_to_the_newest_n_and_deletes_the_pruned_parts(
    engine_with: EngineWith,
) -> None:
    engine = engine_with(session_keep_checkpoints=2)
    sandbox, workspace = engine.sandbox()
    taken = []
    for i in range(3):
        engine.sh(sandbox, f"echo {i} > n.txt")
        taken.append(engine.take(sandbox, workspace))
    kept = [c.id for c in engine.db.list_checkpoints(engine.session.id)]
    assert kept == [taken[1].id, taken[2].id]
    assert not [k for k in engine.blobs.list() if f"/{taken[0].id}/" in k]
    assert [k for k in engine.blobs.list() if f"/{taken[2].id}/" in k]


def test_over_the_untracked_cap_the_largest_files_are_left_out_until_the_rest_fits(
    engine_with: EngineWith,
) -> None:
    engine = engine_with(session_max_untracked_mb=0.01)  # 10,485 bytes
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "head -c 20000 /dev/urandom > big.bin && head -c 6000 /dev/urandom > "
              "mid.bin && echo 'print(1)' > small.py && echo change >> README.md")  # fmt: skip
    checkpoint = engine.take(sandbox, workspace)
    assert checkpoint.part("untracked.tar.zst") or checkpoint.part("untracked.tar.gz")
    left_out = [w for w in checkpoint.warnings if w.startswith("untracked file ")]
    assert [w.split()[2] for w in left_out] == ["big.bin"]
    assert checkpoint.part("wip.patch") is not None
    fresh, again = engine.sandbox()
    engine.restorer.restore_checkpoint(checkpoint, fresh, again.repo_dir)
    assert engine.sh(fresh, "ls; cat small.py; wc -c < mid.bin") == (
        "README.md\nmid.bin\nsmall.py\nsrc\nprint(1)\n6000\n"), checkpoint.warnings


def test_an_oversize_part_is_skipped_with_a_warning_on_the_checkpoint(
    engine_with: EngineWith,
) -> None:
    engine = engine_with(session_max_part_mb=0.01)  # 10,485 bytes
    sandbox, workspace = engine.sandbox()
    # Each file is under the cap; their diff together is not.
    engine.sh(sandbox, "for f in README.md src/main.py; do head -c 6000 /dev/urandom | base64 -w0 "
              ">> $f; done")  # fmt: skip
    checkpoint = engine.take(sandbox, workspace)
    assert checkpoint.part("wip.patch") is None
    assert any(w.startswith("wip.patch skipped") for w in checkpoint.warnings)


def test_a_tracked_file_grown_past_the_part_cap_loses_only_its_own_changes(
    engine_with: EngineWith,
) -> None:
    engine = engine_with(session_max_part_mb=0.01)
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "head -c 30000 /dev/urandom | base64 >> README.md && "
              "echo 'print(2)' > src/main.py")  # fmt: skip
    checkpoint = engine.take(sandbox, workspace)
    [warning] = [w for w in checkpoint.warnings if "README.md" in w]
    assert warning.startswith("uncommitted changes to README.md left out: it is ")
    fresh, again = engine.sandbox()
    engine.restorer.restore_checkpoint(checkpoint, fresh, again.repo_dir)
    assert engine.sh(fresh, "cat src/main.py; git status --porcelain") == "print(2)\n M src/main.py\n"


def test_a_session_patch_over_the_patch_limit_is_skipped_with_a_warning(
    engine_with: EngineWith,
) -> None:
    engine = engine_with(exchange_max_patch_mb=0.01)
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "head -c 30000 /dev/urandom | base64 > new.txt")
    checkpoint = engine.take(sandbox, workspace)
    assert checkpoint.part("session.patch") is None
    assert any(w.startswith("session.patch skipped") for w in checkpoint.warnings)
    assert checkpoint.part("untracked.tar.zst") is not None


def test_an_unchanged_session_skips_the_interval_checkpoint(engine: Engine) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, TURN_ONE)
    engine.take(sandbox, workspace)
    target = engine.target(sandbox, workspace)
    assert engine.checkpointer.take(target, CheckpointReason.INTERVAL, skip_if_unchanged=True) is None
    assert len(engine.db.list_checkpoints(engine.session.id)) == 1


@pytest.mark.parametrize(
    "path", ["README.md", "notes/todo.txt", f"/root/{CONVERSATION}", "src/main.py"]
)
def test_an_edit_that_keeps_size_and_mtime_is_still_noticed(engine: Engine, path: str) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, TURN_ONE)
    engine.take(sandbox, workspace)
    # Same length, same mtime: flip one character and put the old mtime back.
    engine.sh(
        sandbox,
        f"""f={path}; m=$(stat -c %y "$f"); s=$(stat -c %s "$f")
        python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[0]^=1; open(p,'wb').write(b)" "$f"
        touch -d "$m" "$f"; test "$(stat -c %s "$f")" = "$s"; test "$(stat -c %y "$f")" = "$m" """,
    )
    target = engine.target(sandbox, workspace)
    taken = engine.checkpointer.take(target, CheckpointReason.INTERVAL, skip_if_unchanged=True)
    assert taken is not None and taken.reason is CheckpointReason.INTERVAL


HAND_BUILT_TREE = (  # a commit whose tree holds .GIT/hooks/x, which a checkout refuses
    'blob=$(echo hook | git hash-object -w --stdin) && '
    'hooks=$(printf "100644 blob $blob\\tx\\n" | git mktree) && '
    'dotgit=$(printf "040000 tree $hooks\\thooks\\n" | git mktree) && '
    'root=$( (git ls-tree HEAD; printf "040000 tree $dotgit\\t.GIT\\n") | git mktree) && '
    'c=$(git commit-tree "$root" -p HEAD -m planted) && git update-ref HEAD "$c"'
)


def test_what_a_checkpoint_learns_of_a_head_is_kept_out_of_the_agents_reach_until_it_moves(
    engine: Engine,
) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, HAND_BUILT_TREE)
    refused = [w for w in engine.take(sandbox, workspace).warnings if "refuses" in w]
    assert refused and ".GIT/hooks/x" in refused[0], refused
    facts_file = f"{HANGAR_TMP}/tree-facts.json"

    def hangar_sh(script: str) -> str:
        done = engine.sandboxes.exec(sandbox, ["sh", "-c", script], user=SandboxUser.HANGAR)
        assert done.ok, done.stderr
        return done.stdout.decode()

    facts = json.loads(hangar_sh(f"cat {facts_file}"))
    assert facts["head"] == engine.sh(sandbox, "git rev-parse HEAD").strip()
    assert facts["refused"] == [".GIT/hooks/x"] and facts["size"] > 0
    agent = engine.sandboxes.exec(sandbox, ["sh", "-c", f"echo '{{}}' > {facts_file}"])
    assert not agent.ok, "the agent could write the facts a restore's refusals follow"

    # The same head again: the facts are read, not found again (a planted name shows it).
    hangar_sh(f"sed -i 's|.GIT/hooks/x|planted/by/test|' {facts_file}")
    engine.sh(sandbox, "echo more >> README.md")
    again = [w for w in engine.take(sandbox, workspace).warnings if "refuses" in w]
    assert again and "planted/by/test" in again[0], again
    # A new head (committed from the index, which never held .GIT): found again from its tree,
    # written over what a checkpoint killed while it wrote the facts left.
    hangar_sh(f"echo half > {facts_file}.tmp")
    engine.sh(sandbox, "git commit -qam more")
    moved = [w for w in engine.take(sandbox, workspace).warnings if "refuses" in w]
    assert moved == []
    facts = json.loads(hangar_sh(f"cat {facts_file}"))
    assert facts["head"] == engine.sh(sandbox, "git rev-parse HEAD").strip()
    assert facts["refused"] == []
    assert hangar_sh(f"ls {HANGAR_TMP} | grep tree-facts") == "tree-facts.json\n"


def test_a_repository_git_added_whole_is_named_as_left_out(engine: Engine) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "git init -q vendored && cd vendored && echo x > x && git add x && "
              "git commit -qm x && cd .. && git add vendored 2>/dev/null && "
              "test \"$(git ls-files -s vendored | cut -c1-6)\" = 160000")  # fmt: skip
    checkpoint = engine.take(sandbox, workspace)
    [warning] = [w for w in checkpoint.warnings if w.startswith("nested repositories")]
    assert warning.endswith(": vendored"), warning


def test_an_edit_the_index_hides_is_not_skipped_as_unchanged(engine: Engine) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, TURN_ONE)
    engine.sh(sandbox, "git update-index --assume-unchanged README.md")
    engine.take(sandbox, workspace)
    # (git status would rewrite the index, whose stat the fingerprint holds: not here.)
    engine.sh(sandbox, "echo hidden >> README.md")
    target = engine.target(sandbox, workspace)
    taken = engine.checkpointer.take(target, CheckpointReason.INTERVAL, skip_if_unchanged=True)
    assert taken is not None, "an edit hidden by assume-unchanged was taken for no change"
    # Nothing changed since: the next interval check skips again.
    assert engine.checkpointer.take(target, CheckpointReason.INTERVAL, skip_if_unchanged=True) is None


def test_a_pre_destroy_hook_takes_a_destroy_checkpoint_before_the_sandbox_goes(
    engine: Engine,
) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "echo 'work in progress' > wip.txt")

    def checkpoint_first(info: SandboxInfo) -> None:
        if info.labels.get("hangar.session") == engine.session.id:
            engine.checkpointer.take(engine.target(info.id, workspace), CheckpointReason.DESTROY)

    policy = SandboxPolicy(engine.sandboxes)
    policy.add_pre_destroy_hook(checkpoint_first)
    policy.destroy(sandbox)
    [checkpoint] = engine.db.list_checkpoints(engine.session.id)
    assert checkpoint.reason is CheckpointReason.DESTROY

    fresh, again = engine.sandbox()
    engine.restorer.restore(engine.session.id, fresh, again.repo_dir)
    assert engine.sh(fresh, "cat wip.txt") == "work in progress\n"


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


ESCAPES = {
    "absolute path": [_file("/tmp/escaped")],
    "dot-dot path": [_file("../escaped")],
    "link that leads out": [_link("out", "../../tmp")],
    "absolute link": [_link("out", "/tmp")],
    "file through a link": [_link("inner", "notes"), _file("inner/escaped")],
    "hard link": [_link("hard", "/etc/passwd", tarfile.LNKTYPE)],
}


@pytest.mark.parametrize("members", ESCAPES.values(), ids=list(ESCAPES))
def test_archives_that_try_to_escape_are_refused_and_nothing_is_written(
    engine: Engine, members: list[tuple[tarfile.TarInfo, bytes | None]]
) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "echo committed > keep.txt && git add keep.txt && git commit -qm keep")
    good = engine.take(sandbox, workspace)
    # Replace the untracked archive with a hostile one, sealed and recorded like a real part.
    hostile = _tar([_file("harmless.txt"), *members])
    data_key = engine.checkpointer.parts.data_key(good)
    stored = engine.checkpointer.parts.put(
        engine.session.id, good.id, "untracked.tar.gz", data_key, [_gzip(hostile)]
    )
    from hangar.models import CheckpointPart, Compression

    evil = good.model_copy(
        update={
            "parts": [
                *good.parts,
                CheckpointPart(
                    name="untracked.tar.gz",
                    size=stored.size,
                    stored_size=stored.stored_size,
                    compression=Compression.GZIP,
                    sha256=stored.sha256,
                ),
            ]
        }
    )
    fresh, again = engine.sandbox()
    with pytest.raises(UnsafeArchive):
        engine.restorer.restore_checkpoint(evil, fresh, again.repo_dir)
    listing = engine.sh(fresh, "ls -A /tmp; ls -A; ls -A ~")
    assert "escaped" not in listing and "harmless.txt" not in listing and "out" not in listing.split()


def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data)


def test_a_checkpoint_that_times_out_stores_nothing_and_says_so(
    engine_with: EngineWith,
) -> None:
    engine = engine_with(checkpoint_timeout_seconds=0.001)
    sandbox, workspace = engine.sandbox()
    with pytest.raises(CheckpointError, match="timed out"):
        engine.checkpointer.take(engine.target(sandbox, workspace), CheckpointReason.MANUAL)
    assert engine.blobs.list() == []
    assert engine.db.list_checkpoints(engine.session.id) == []


EDGE_STATE = """
git status --porcelain=v1 --untracked-files=all | sort
git diff --cached --stat | tail -1
stat -c '%a %n' run.sh
sha256sum 'name with spaces.txt' config.env src/main.py 2>&1 | sort
ls README.md 2>&1 || true
"""


def test_a_restored_session_restores_again_with_its_index_deletions_and_modes(
    engine: Engine,
) -> None:
    first, workspace = engine.sandbox()
    engine.sh(
        first,
        """echo '*.env' > .gitignore && git add .gitignore && git commit -qm ignore
        echo 'SECRET_NAME=1' > config.env && git add -f config.env
        echo 'staged edit' >> src/main.py && git add src/main.py && echo 'unstaged' >> src/main.py
        git rm -q README.md
        printf '#!/bin/sh\\n' > run.sh && git add run.sh && git commit -qm run && chmod +x run.sh
        echo spaced > 'name with spaces.txt'""",
    )
    before = engine.sh(first, EDGE_STATE)
    engine.take(first, workspace)
    engine.sandboxes.destroy(first)

    second, again = engine.sandbox()
    engine.restorer.restore(engine.session.id, second, again.repo_dir)
    assert engine.sh(second, EDGE_STATE) == before
    engine.take(second, again)
    engine.sandboxes.destroy(second)

    third, once_more = engine.sandbox()
    report = engine.restorer.restore(engine.session.id, third, once_more.repo_dir)
    assert report is not None and not report.fell_back
    assert engine.sh(third, EDGE_STATE) == before
    assert "config.env" in engine.sh(third, "git ls-files --cached config.env")


def test_entries_restore_would_refuse_are_left_out_with_a_warning_and_the_rest_restores(
    engine: Engine,
) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(
        sandbox,
        f"""ln -s /etc/passwd link-out && ln -s src/main.py link-in && mkfifo pipe
        mkdir -p nested && git -C nested init -q && echo n > nested/file
        mkdir -p ~/.claude/projects/p ~/.claude/projects/-workspace-app && mkfifo ~/.claude/projects/p/fifo
        echo '{{}}' > ~/{CONVERSATION} && echo kept > kept.txt""",
    )
    checkpoint = engine.take(sandbox, workspace)
    warnings = " | ".join(checkpoint.warnings)
    # git itself never lists a FIFO in the repo, so only the one in HOME needs a warning.
    assert "link-out" in warnings and "fifo" in warnings
    assert "nested" in warnings
    engine.sandboxes.destroy(sandbox)

    fresh, again = engine.sandbox()
    report = engine.restorer.restore(engine.session.id, fresh, again.repo_dir)
    assert report is not None and not report.fell_back
    assert engine.sh(fresh, "cat kept.txt; readlink link-in; { ls link-out pipe 2>&1 || true; } | wc -l") == (
        "kept\nsrc/main.py\n2\n"
    )
    assert engine.sh(fresh, f"cat ~/{CONVERSATION}") == "{}\n"


def test_commits_only_a_stale_or_foreign_remote_ref_holds_still_restore(
    engine: Engine, tmp_path: Path
) -> None:
    sandbox, workspace = engine.sandbox()
    # A remote-tracking ref the next clone will not have: the commit exists only here.
    engine.sh(
        sandbox,
        """echo f > f.txt && git add f.txt && git commit -qm pushed-elsewhere
        git update-ref refs/remotes/fork/main HEAD
        echo g > g.txt && git add g.txt && git commit -qm local""",
    )
    checkpoint = engine.take(sandbox, workspace)
    engine.sandboxes.destroy(sandbox)
    fresh, again = engine.sandbox()
    report = engine.restorer.restore(engine.session.id, fresh, again.repo_dir)
    assert report is not None and report.checkpoint.id == checkpoint.id and not report.fell_back
    assert engine.sh(fresh, "git log --format=%s -2") == "local\npushed-elsewhere\n"


def test_concurrent_checkpoints_of_one_sandbox_each_record_a_consistent_head(
    engine: Engine,
) -> None:
    import threading

    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "echo 1 > one.txt && git add one.txt && git commit -qm one")
    results: list[Checkpoint] = []
    barrier = threading.Barrier(2)

    def take() -> None:
        barrier.wait()
        results.append(engine.take(sandbox, workspace))

    def commit_meanwhile() -> None:
        barrier.wait()
        engine.sh(sandbox, "echo 2 > two.txt && git add two.txt && git commit -qm two")

    threads = [threading.Thread(target=take), threading.Thread(target=commit_meanwhile)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.append(engine.take(sandbox, workspace))
    for checkpoint in results:
        fresh, again = engine.sandbox()
        engine.restorer.restore_checkpoint(checkpoint, fresh, again.repo_dir)
        assert engine.sh(fresh, "git rev-parse HEAD").strip() == checkpoint.head
        engine.sandboxes.destroy(fresh)


def test_sandbox_output_past_the_cap_fails_the_checkpoint_and_stores_nothing(
    engine_with: EngineWith,
) -> None:
    # Parts under the per-part cap can still add up past what one checkpoint may send.
    engine = engine_with(session_max_part_mb=0.002, session_max_untracked_mb=1)
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "head -c 400000 /dev/urandom > noise.bin")
    checkpoint = engine.take(sandbox, workspace)
    assert checkpoint.part("untracked.tar.zst") is None
    assert any(w.startswith("untracked.tar.zst skipped") for w in checkpoint.warnings)


@pytest.mark.parametrize("change", ["cut short", "longer"])
def test_output_that_disagrees_with_its_manifest_fails_the_checkpoint_and_stores_nothing(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, TURN_ONE)
    exec_ = engine.sandboxes.exec

    def altered(*args: Any, stdout: BinaryIO | None = None, **kwargs: Any) -> Any:
        """The sandbox's answer, with its last byte dropped or one byte more."""
        spool = io.BytesIO()
        result = exec_(*args, stdout=spool, **kwargs)
        data = spool.getvalue()
        assert stdout is not None
        stdout.write(data[:-1] if change == "cut short" else data + b"x")
        return result

    monkeypatch.setattr(engine.sandboxes, "exec", altered)
    message = "ended early" if change == "cut short" else "trailing bytes"
    with pytest.raises(CheckpointError, match=message):
        engine.checkpointer.take(engine.target(sandbox, workspace), CheckpointReason.TURN)
    assert engine.blobs.list() == []
    assert engine.db.list_checkpoints(engine.session.id) == []


def test_a_part_that_fails_to_store_deletes_the_parts_stored_beside_it(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, TURN_ONE)
    put = engine.blobs.put
    stored: list[str] = []

    def failing(key: str, data: Any, **kwargs: Any) -> int:
        if key.endswith("/wip.patch"):
            raise BackendError("the store is full")
        size = put(key, data, **kwargs)
        stored.append(key)
        return size

    monkeypatch.setattr(engine.blobs, "put", failing)
    with pytest.raises(CheckpointError, match="the store is full"):
        engine.checkpointer.take(engine.target(sandbox, workspace), CheckpointReason.TURN)
    assert len(stored) >= 3, "the other parts were stored, side by side"
    assert engine.blobs.list() == []
    assert engine.db.list_checkpoints(engine.session.id) == []
