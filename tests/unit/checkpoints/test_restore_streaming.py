"""Restores whose parts stream from the unsealer into the restore's exec (issue 23, item 6)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import DecryptionFailed
from hangar.keys.local import LocalKeys
from hangar.models import Checkpoint
from hangar.sandboxes.local import LocalSandboxes
from hangar.checkpoints.parts import CheckpointParts
from hangar.checkpoints.restore import Restorer
from tests.rig import Engine, make_engine

pytestmark = pytest.mark.sandbox

# Everything in the clone but .git's insides, with sizes and times; HEAD, refs and the index.
TREE_STATE = (
    "find . -path ./.git -prune -o -printf '%p %y %s %T@ %m\\n' | sort; git show-ref; "
    "git rev-parse HEAD; git --no-optional-locks status --porcelain=v1 --untracked-files=all; "
    "sha256sum .git/index"
)
WORK = (
    "echo 'def feature(): return 1' > feature.py && git add feature.py && git commit -qm f; "
    "echo 'an uncommitted line' >> README.md; mkdir -p data; head -c 300000 /dev/urandom > "
    "data/blob.bin; mkdir -p ~/.claude/projects/-workspace-app; "
    "echo '{\"role\": \"user\"}' > ~/.claude/projects/-workspace-app/conv.jsonl"
)


@pytest.fixture
def engine(
    settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
    sandboxes: LocalSandboxes, remote: Path,
) -> Engine:  # fmt: skip
    """Format-1 checkpoints: these tests lie in a part's record (its hash, its size) and count
    the parts' reads; format 2's chunks are checked in test_chunked_checkpoints.py."""
    return make_engine(settings.replace(checkpoint_format=1), db, blobs, keys, sandboxes, remote)


def restored_parts(checkpoint: Checkpoint) -> list[str]:
    restored = ("repo.bundle", "staged.patch", "wip.patch", "untracked.", "agent.", "exchange.")
    return [p.name for p in checkpoint.parts if p.name.startswith(restored)]


@pytest.mark.parametrize("lie", ["hash", "size"])
def test_a_part_that_fails_its_check_only_at_its_end_changes_nothing_in_the_sandbox(
    engine: Engine, lie: str
) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, WORK)
    checkpoint = engine.take(sandbox, workspace)
    # The last part streamed: every byte of every part reaches the sandbox before the check
    # that fails (a hash checked after the last chunk; a size one byte short of the part's).
    last = restored_parts(checkpoint)[-1]
    parts = [
        p.model_copy(update={"sha256": "0" * 64} if lie == "hash" else {"size": p.size - 1})
        if p.name == last else p
        for p in checkpoint.parts
    ]
    lying = checkpoint.model_copy(update={"parts": parts})
    fresh, again = engine.sandbox()
    before = engine.sh(fresh, TREE_STATE, cwd=again.repo_dir)
    home_before = engine.sh(fresh, "find ~ -printf '%p %y %s %T@\\n' | sort")

    with pytest.raises(DecryptionFailed):
        engine.restorer.restore_checkpoint(lying, fresh, again.repo_dir, fresh=True)

    assert engine.sh(fresh, TREE_STATE, cwd=again.repo_dir) == before
    assert engine.sh(fresh, "find ~ -printf '%p %y %s %T@\\n' | sort") == home_before
    # The same sandbox takes the true checkpoint afterwards.
    engine.restorer.restore_checkpoint(checkpoint, fresh, again.repo_dir)
    assert engine.sh(fresh, "git log -1 --format=%s; wc -c < data/blob.bin") == "f\n300000\n"


class CountingParts(CheckpointParts):
    """Counts the plaintext chunks unsealed so far, over every part."""

    unsealed = 0

    @contextmanager
    def opened(self, checkpoint: Checkpoint, name: str,
               data_key: bytes | None = None) -> Iterator[Iterator[bytes]]:  # fmt: skip
        with super().opened(checkpoint, name, data_key) as chunks:
            yield self._counted(chunks)

    def _counted(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            CountingParts.unsealed += 1
            yield chunk


class Watching:
    """The sandbox port, noting how many chunks were unsealed when the restore's exec began
    and when its standard input was first read."""

    def __init__(self, inner: LocalSandboxes) -> None:
        self.inner = inner
        self.seen: dict[str, int] = {}

    def exec(self, sandbox_id: str, argv: Any, *, stdin: Any = None, **options: Any) -> Any:
        self.seen["exec"] = CountingParts.unsealed

        def watched() -> Iterator[bytes]:
            for i, chunk in enumerate(stdin):
                if i == 1:  # the plan went first; now the parts' bytes
                    self.seen["first part chunk"] = CountingParts.unsealed
                yield chunk

        return self.inner.exec(sandbox_id, argv, stdin=watched(), **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_the_restore_starts_before_any_part_is_unsealed_and_takes_them_chunk_by_chunk(
    engine: Engine, settings: Settings, keys: LocalKeys
) -> None:
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, WORK)
    checkpoint = engine.take(sandbox, workspace)
    fresh, again = engine.sandbox()
    port = Watching(engine.sandboxes)
    restorer = Restorer(engine.db, engine.blobs, keys, port, settings)  # type: ignore[arg-type]
    restorer.parts = CountingParts(engine.blobs, keys)
    CountingParts.unsealed = 0

    restorer.restore_checkpoint(checkpoint, fresh, again.repo_dir, fresh=True)

    assert port.seen == {"exec": 0, "first part chunk": 1}
    assert CountingParts.unsealed >= len(restored_parts(checkpoint))
    assert engine.sh(fresh, "git log -1 --format=%s; wc -c < data/blob.bin") == "f\n300000\n"
