"""Every checkpoint restores, whatever tree the agent leaves: random trees (seeded, so a failure
replays) of odd names, links in and out of everything, .git folders in any case, FIFOs and
unreadable files, in the repo and in a conversation folder; each is checkpointed in a real
sandbox and restored into a fresh one, and every plain file comes back as it was."""

from __future__ import annotations

import json

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.sandboxes.local import LocalSandboxes
from tests.rig import make_engine

pytestmark = pytest.mark.sandbox

# Run as the agent in the sandbox: build a random tree under the repo and a conversation
# folder, then print the plain files (regular, under no link or .git, readable) with contents.
BUILD = r"""
import json, os, random, sys
rng = random.Random(int(sys.argv[1]))
roots = ["/workspace/app", os.path.expanduser("~/.claude/projects/-workspace-app")]
os.makedirs(roots[1], exist_ok=True)
NAMES = ["a", "b c", "-dash", "ünï", "x.txt", ".hidden", "..dots", ".git", ".GIT", ".Git",
         "deep", "n\\tab", "semi;colon", "*star", "back\\\\slash"]
TARGETS = ["a", "../a", "../../..", "/etc/passwd", ".git/HEAD", ".GIT", "deep/x.txt",
           "../../../../root/.netrc", "missing", "deep/../a", ".", "..", "b c/.git"]
plain = {}
for root in roots:
    for _ in range(rng.randint(10, 40)):
        parts = [rng.choice(NAMES) for _ in range(rng.randint(1, 3))]
        folder = os.path.join(root, *parts[:-1])
        path = os.path.join(folder, parts[-1])
        if os.path.commonpath([path, os.path.join(roots[0], ".git")]) == os.path.join(roots[0], ".git"):
            continue  # the repo's own git folder is not the agent's tree to litter here
        try:
            os.makedirs(folder, exist_ok=True)
            kind = rng.choice(["file", "file", "file", "dir", "link", "link", "fifo", "secret"])
            if os.path.lexists(path):
                continue
            if kind == "dir":
                os.mkdir(path)
            elif kind == "link":
                os.symlink(rng.choice(TARGETS), path)
            elif kind == "fifo":
                os.mkfifo(path)
            else:
                data = os.urandom(rng.randint(0, 2000)).hex()
                with open(path, "w") as f:
                    f.write(data)
                if kind == "secret":
                    os.chmod(path, 0)
                rel = os.path.relpath(path, root)
                bits = rel.split("/")
                if not any(b.lower() == ".git" for b in bits):
                    plain[(root, rel)] = data
        except OSError:
            continue
# A plain file counts only if nothing on its way is a link.
def through_link(root, rel):
    bits = rel.split("/")
    return any(os.path.islink(os.path.join(root, *bits[:i])) for i in range(1, len(bits) + 1))
out = {"%s//%s" % k: v for k, v in plain.items() if not through_link(*k)}
print(json.dumps(out))
"""

CHECK = r"""
import json, os, sys
want = json.loads(sys.stdin.read())
bad = []
for key, data in want.items():
    root, rel = key.split("//", 1)
    path = os.path.join(root, rel)
    try:
        os.chmod(path, 0o600)
        with open(path) as f:
            if f.read() != data:
                bad.append(rel + ": differs")
    except OSError as exc:
        bad.append("%s: %s" % (rel, exc))
print(json.dumps(bad))
"""


@pytest.mark.parametrize("seed", range(8))
def test_a_checkpoint_of_a_random_tree_restores_with_every_plain_file(
    seed: int, settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
    sandboxes: LocalSandboxes, remote: object,
) -> None:
    engine = make_engine(settings, db, blobs, keys, sandboxes, remote,  # type: ignore[arg-type]
                         conversation_dirs=(".claude/projects",))  # fmt: skip
    sandbox, workspace = engine.sandbox()
    built = sandboxes.exec(sandbox, ["/usr/bin/python3", "-c", BUILD, str(seed)])
    assert built.ok, built.stderr.decode()
    want = built.stdout.decode()
    checkpoint = engine.take(sandbox, workspace)
    fresh, again = engine.sandbox()
    engine.restorer.restore_checkpoint(checkpoint, fresh, again.repo_dir)  # raises if refused
    checked = sandboxes.exec(fresh, ["/usr/bin/python3", "-c", CHECK], stdin=want.encode())
    assert checked.ok, checked.stderr.decode()
    assert json.loads(checked.stdout) == [], checkpoint.warnings
