"""What the agent leaves in its tree never fails a checkpoint (issue 21): names that are not
UTF-8, a split index, tens of thousands of untracked files, folders and files swapped. Each is
done from inside a real sandbox as the agent; the checkpoint succeeds, and a restore into a
fresh sandbox brings back everything a restore can hold."""

from __future__ import annotations

import pytest

from hangar.models import CheckpointReason
from tests.unit.sessions.world import World, start

pytestmark = pytest.mark.sandbox

# bash's $'...' spells the bytes: \xff and \xfe are never UTF-8.
NOT_UTF8 = r"""
mkfifo $'\xff\xfe'
printf 'raw\n' > $'\xffx'
mkdir $'d\xfe' && printf 'deep\n' > $'d\xfe/f\xfa'
echo edit >> README.md
mkdir -p ~/.gemini/antigravity-cli/conversations
printf 'said\n' > ~/.gemini/antigravity-cli/conversations/$'\xffc'
"""


def suspend_and_open(world: World) -> None:
    world.service.suspend("demo")
    newest = world.db.list_checkpoints(world.service.resolve("demo").id)[-1]
    assert newest.reason is CheckpointReason.SUSPEND
    world.open("demo")
    assert world.service.resolve("demo").restored_from == newest.id  # the newest, no fallback


def test_names_that_are_not_utf8_come_back_byte_for_byte_and_a_fifo_so_named_is_named_escaped(
    world: World,
) -> None:
    start(world)
    world.sh("demo", NOT_UTF8)
    suspend_and_open(world)
    [checkpoint] = [c for c in world.service.get("demo").checkpoints
                    if c.reason is CheckpointReason.SUSPEND]  # fmt: skip
    assert any("\\xff\\xfe is a FIFO" in w for w in checkpoint.warnings), checkpoint.warnings
    assert world.sh("demo", r"cat $'\xffx' $'d\xfe/f\xfa'; tail -1 README.md") == "raw\ndeep\nedit\n"
    assert world.sh("demo", r"cat ~/.gemini/antigravity-cli/conversations/$'\xffc'") == "said\n"
    assert world.sh("demo", r"test -e $'\xff\xfe' && echo there || echo gone") == "gone\n"
    patch = world.service.patch("demo")  # the session patch holds the names as they are
    assert b"+++ b/\xffx\n" in patch and b"+++ b/d\xfe/f\xfa\n" in patch


def test_a_split_index_checkpoints_with_what_was_staged_and_what_was_not(world: World) -> None:
    start(world)
    world.sh("demo", "echo staged > staged.txt && git add staged.txt && echo more >> README.md "
             "&& git add README.md && echo unstaged >> README.md && git update-index --split-index "
             "&& echo later >> staged.txt && ls .git/sharedindex.* >/dev/null")  # fmt: skip
    show = "git status --porcelain=v1; git diff --cached; git diff"
    before = world.sh("demo", show)
    suspend_and_open(world)
    assert world.sh("demo", show) == before
    assert "AM staged.txt" in before and "MM README.md" in before


def test_tens_of_thousands_of_untracked_files_checkpoint_and_come_back(world: World) -> None:
    # The session patch was made with git add -N, a pathspec per file: quadratic in the files
    # (20,000 took 15 s; 200,000 never finished within the checkpoint's timeout).
    start(world)
    world.sh("demo", "python3 -c \"import os\nfor i in range(20000):\n    d = 'u/%03d' % (i % 100)"
             "\n    os.makedirs(d, exist_ok=True)\n    open(d + '/f%d.txt' % i, 'w').write('%d\\n' % i)\"")
    world.service.suspend("demo")
    checkpoint = world.db.list_checkpoints(world.service.resolve("demo").id)[-1]
    contents = world.service.checkpointer.contents(checkpoint)
    assert contents.has("session.patch") and not checkpoint.warnings
    patch = world.service.patch("demo")  # from the checkpoint
    assert patch.count(b"\n+++ b/u/") == 20000 and b"+++ b/u/007/f19907.txt\n" in patch
    world.open("demo")
    assert world.service.resolve("demo").restored_from == checkpoint.id
    assert world.sh("demo", "find u -type f | wc -l; cat u/007/f19907.txt") == "20000\n19907\n"


def test_tracked_folders_and_files_swapped_for_each_other_checkpoint_and_come_back(
    world: World,
) -> None:
    start(world)
    world.sh("demo", "rm -r src && echo now-a-file > src && rm README.md && mkdir README.md && "
             "echo inside > README.md/x")  # fmt: skip
    show = "cat src README.md/x; git status --porcelain=v1 --untracked-files=all"
    before = world.sh("demo", show)
    suspend_and_open(world)
    assert world.sh("demo", show) == before
    assert before.startswith("now-a-file\ninside\n D README.md\n D src/main.py\n")


def test_thousands_of_staged_new_files_checkpoint_and_come_back_staged(world: World) -> None:
    # Past 1,000 index entries the head lacks, wip.patch and the session patch are split (a
    # tree diff over them is quadratic); the restore sees one patch either way.
    start(world)
    world.sh("demo", "mkdir many && for i in $(seq 1500); do echo $i > many/f$i; done && "
             "git add many && echo edit >> README.md && git rm -q --cached src/main.py && "
             "echo later >> many/f7 && rm many/f9")  # fmt: skip
    show = "git status --porcelain=v1 --untracked-files=all; git diff --cached --stat; git diff"
    before = world.sh("demo", show)
    world.service.suspend("demo")
    checkpoint = world.db.list_checkpoints(world.service.resolve("demo").id)[-1]
    assert not checkpoint.warnings, checkpoint.warnings
    patch = world.service.patch("demo")  # from the checkpoint: base to working tree
    assert patch.count(b"\n+++ b/many/") == 1499 and b"+++ b/many/f9\n" not in patch
    world.open("demo")
    assert world.service.resolve("demo").restored_from == checkpoint.id
    assert world.sh("demo", show) == before
    assert world.sh("demo", "cat many/f7 src/main.py") == "7\nlater\nprint(1)\n"


@pytest.mark.parametrize("breaks", ["printf 'DIRC garbage' > .git/index",
                                    "git update-index --split-index && rm .git/sharedindex.*"])
def test_an_index_git_cannot_read_checkpoints_the_work_from_a_fresh_one(
    world: World, breaks: str
) -> None:
    start(world)
    world.sh("demo", f"echo edit >> README.md && echo new > new.txt && git add new.txt && {breaks}")
    suspend_and_open(world)
    checkpoint = world.db.list_checkpoints(world.service.resolve("demo").id)[-1]
    assert any("index could not be read" in w for w in checkpoint.warnings), checkpoint.warnings
    assert world.sh("demo", "tail -1 README.md; cat new.txt; git status --porcelain=v1 -- "
                    "README.md new.txt") == "edit\nnew\n M README.md\n?? new.txt\n"
