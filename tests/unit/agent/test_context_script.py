"""hangar/agent/context.py run as sandboxes get it (``agent.command("context", CONFIG)``: the
installed launcher and modules, run by the sandbox's interpreter with ``-I -S``) on real git
repos under tmp_path.

Each test builds a world: a bare ``origin`` with two commits on main, the ``agent``'s clone
(the sandbox's repo, on its work branch at the session's base) and the ``user``'s clone, where
the user makes unpushed commits and uncommitted changes and packs them as the CLI does: a
bundle (``git bundle create F HEAD --not --remotes``, based on the merge base with the
upstream) and a patch (``git diff --binary HEAD`` with untracked files added through a
scratch index). The script runs with a HOME of its own, so no git identity or global config of
the host's helps it.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests import installed_scripts as scripts

from tests.conftest import GIT_IDENTITY, git

LOGO = bytes(range(256)) * 4  # a binary file: the patch must carry it with --binary


@dataclass
class World:
    root: Path
    origin: Path
    agent: Path
    user: Path
    home: Path
    first: str  # main's first commit
    session_base: str  # main's second commit: where the agent's clone starts

    @property
    def marker(self) -> Path:
        return self.root / "hangar" / "turns" / "1" / "context.json"


def commit(repo: Path, files: dict[str, str | bytes | None], message: str) -> str:
    """Write (None: remove) ``files`` in ``repo`` and commit them all; the new commit."""
    change(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def change(repo: Path, files: dict[str, str | bytes | None]) -> None:
    for name, content in files.items():
        path = repo / name
        if content is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


@pytest.fixture
def world(tmp_path: Path) -> World:
    origin, seed = tmp_path / "origin.git", tmp_path / "seed"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(tmp_path, "init", "-q", "-b", "main", str(seed))
    first = commit(seed, {"README.md": "# app\n", "app.py": "print(1)\n", "logo.bin": LOGO},
                   "first")  # fmt: skip
    second = commit(seed, {"docs.md": "docs\n"}, "second")
    git(seed, "push", "-q", str(origin), "main")
    repo = tmp_path / "workspace" / "app"
    git(tmp_path, "clone", "-q", str(origin), str(repo))
    git(repo, "checkout", "-q", "-B", "work")  # as the sandbox's clone does
    user = tmp_path / "user"
    git(tmp_path, "clone", "-q", str(origin), str(user))
    home = tmp_path / "home"
    home.mkdir()
    return World(tmp_path, origin, repo, user, home, first, second)


# Sending, as the user's machine does --------------------------------------------------------


def send_bundle(world: World, name: str = "user.bundle") -> dict[str, str]:
    path = world.root / "in" / name
    path.parent.mkdir(exist_ok=True)
    git(world.user, "bundle", "create", "-q", str(path), "HEAD", "--not", "--remotes")
    return {"path": str(path), "base_commit": git(world.user, "merge-base", "HEAD", "@{upstream}")}


def send_patch(world: World) -> dict[str, str]:
    index = world.root / "scratch-index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    for args in (["read-tree", "HEAD"], ["add", "-A"], ["diff", "--cached", "--binary", "HEAD"]):
        proc = subprocess.run(["git", "-C", str(world.user), *args], env=env, capture_output=True,
                              check=True)  # fmt: skip
    index.unlink()
    path = world.root / "in" / "user.patch"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(proc.stdout)
    return {"path": str(path)}


# Running the script, as the sandbox does ------------------------------------------------------


def config(world: World, **fields: object) -> str:
    return json.dumps({"repo": str(world.agent), "marker": str(world.marker),
                       "session_base": world.session_base, "bundle": None, "patch": None,
                       **fields})  # fmt: skip


def run(cfg: str, world: World) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in GIT_IDENTITY}
    env.update(HOME=str(world.home), XDG_CONFIG_HOME=str(world.home / ".config"))
    return subprocess.run(scripts.command("context", cfg), capture_output=True, env=env, timeout=60,
                          check=False)  # fmt: skip


def context(world: World, **fields: object) -> dict[str, object]:
    proc = run(config(world, **fields), world)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == 1, proc.stdout
    answer: dict[str, object] = json.loads(lines[0])
    return answer


def state(repo: Path) -> dict[str, object]:
    """All that a refusal must leave as it was: HEAD, the branches, the index, the files."""
    files = {str(p.relative_to(repo)): p.read_bytes()
             for p in sorted(repo.rglob("*")) if p.is_file() and ".git" not in p.parts}  # fmt: skip
    return {
        "head": git(repo, "rev-parse", "--symbolic-full-name", "HEAD"),
        "commit": git(repo, "rev-parse", "HEAD"),
        "branches": git(repo, "for-each-ref", "refs/heads", "refs/hangar"),
        "staged": git(repo, "diff", "--cached", "--binary"),
        "unstaged": git(repo, "diff", "--binary"),
        "status": status(repo),
        "files": files,
    }


def status(repo: Path) -> list[str]:
    """``git status --porcelain`` (untracked files one by one), each line as git prints it."""
    proc = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "-uall"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return proc.stdout.splitlines()


def tree(repo: Path) -> dict[str, bytes]:
    return state(repo)["files"]  # type: ignore[return-value]


def dirty(world: World) -> None:
    """Give the agent uncommitted work of every kind, none in the way of the user's."""
    change(world.agent, {"README.md": "# app, staged\n"})
    git(world.agent, "add", "README.md")
    change(world.agent, {"README.md": "# app, staged and more\n", "docs.md": "docs, unstaged\n",
                         "scratch.txt": "untracked\n"})  # fmt: skip


# The bundle ---------------------------------------------------------------------------------


def session_commit_pulled(world: World) -> str:
    """The session made a commit of its own, which the user pulled (and builds on)."""
    own = commit(world.agent, {"agent.md": "the agent's\n"}, "the agent's work")
    git(world.user, "fetch", "-q", str(world.agent), "work")
    git(world.user, "merge", "-q", "--ff-only", "FETCH_HEAD")
    return own


def test_a_bundle_of_unpushed_commits_fast_forwards_the_branch(world: World) -> None:
    session_commit_pulled(world)
    commit(world.user, {"app.py": "print(2)\n"}, "two")
    tip = commit(world.user, {"lib/new.py": "x = 1\n"}, "three")

    answer = context(world, bundle=send_bundle(world))

    assert answer == {"ok": True, "head": tip, "base": None, "moved": "fast-forward",
                      "patched": False}  # fmt: skip
    assert git(world.agent, "symbolic-ref", "HEAD") == "refs/heads/work"
    assert git(world.agent, "rev-parse", "work") == tip
    assert tree(world.agent) == tree(world.user)
    assert status(world.agent) == []
    assert git(world.agent, "for-each-ref", "refs/hangar") == ""
    assert git(world.agent, "reflog", "-1", "--format=%gs", "work") == "hangar: the user's commits"


def test_a_bundle_on_a_commit_pushed_since_the_clone_fetches_it_and_fast_forwards(
    world: World,
) -> None:
    pushed = commit(world.user, {"app.py": "print(2)\n"}, "pushed")
    git(world.user, "push", "-q", "origin", "main")
    tip = commit(world.user, {"app.py": "print(3)\n"}, "unpushed")
    missing = subprocess.run(["git", "-C", str(world.agent), "cat-file", "-e", pushed], check=False)
    assert missing.returncode != 0  # the agent's clone does not have it yet

    answer = context(world, bundle=send_bundle(world))

    assert answer == {"ok": True, "head": tip, "base": pushed, "moved": "fresh-start",
                      "patched": False}  # fmt: skip
    assert git(world.agent, "rev-parse", "origin/main") == pushed
    assert (world.agent / "app.py").read_text() == "print(3)\n"


def test_a_bundle_needing_other_commits_pushed_since_the_clone_fetches_them_first(
    world: World,
) -> None:
    """The user merged a branch pushed since the clone: base_commit is the clone's own commit,
    but the bundle also needs the merged branch's, which only origin has."""
    git(world.user, "checkout", "-q", "-b", "feature")
    pushed = commit(world.user, {"feature.md": "feature\n"}, "feature")
    git(world.user, "push", "-q", "origin", "feature")
    git(world.user, "checkout", "-q", "main")
    git(world.user, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    tip = git(world.user, "rev-parse", "HEAD")
    bundle = send_bundle(world)
    assert bundle["base_commit"] == world.session_base

    answer = context(world, bundle=bundle)

    assert answer == {"ok": True, "head": tip, "base": world.session_base,
                      "moved": "fresh-start", "patched": False}  # fmt: skip
    assert git(world.agent, "rev-parse", "origin/feature") == pushed


def test_a_branch_without_commits_of_its_own_starts_fresh_on_the_users_base(
    world: World,
) -> None:
    """The user works on a branch pushed since the clone, which main's second commit is not in:
    the agent's branch, still at the session's base, starts over from the user's commits."""
    git(world.user, "checkout", "-q", "-b", "topic", world.first)
    pushed = commit(world.user, {"topic.md": "topic\n"}, "topic")
    git(world.user, "push", "-q", "-u", "origin", "topic")
    tip = commit(world.user, {"app.py": "print('topic')\n"}, "unpushed on topic")

    answer = context(world, bundle=send_bundle(world))

    assert answer == {"ok": True, "head": tip, "base": pushed, "moved": "fresh-start",
                      "patched": False}  # fmt: skip
    assert git(world.agent, "symbolic-ref", "HEAD") == "refs/heads/work"
    assert git(world.agent, "rev-parse", "work") == tip
    assert tree(world.agent) == tree(world.user)
    assert not (world.agent / "docs.md").exists()  # main's second commit is not in topic


def test_a_detached_head_moves_the_same_way_and_no_branch_moves(world: World) -> None:
    own = session_commit_pulled(world)
    git(world.agent, "checkout", "-q", "--detach")
    tip = commit(world.user, {"app.py": "print(2)\n"}, "two")

    answer = context(world, bundle=send_bundle(world))

    assert answer == {"ok": True, "head": tip, "base": None, "moved": "fast-forward",
                      "patched": False}  # fmt: skip
    assert git(world.agent, "rev-parse", "--symbolic-full-name", "HEAD") == "HEAD"
    assert git(world.agent, "rev-parse", "HEAD") == tip
    assert git(world.agent, "rev-parse", "work") == own


def test_the_agents_uncommitted_changes_are_kept_staged_ones_staged(world: World) -> None:
    dirty(world)
    staged, unstaged = git(world.agent, "diff", "--cached"), git(world.agent, "diff")
    tip = commit(world.user, {"app.py": "print(2)\n", "lib/new.py": "x = 1\n"}, "two")
    os.utime(world.agent / "app.py", (1_500_000_000, 1_500_000_000))  # touched, not changed

    answer = context(world, bundle=send_bundle(world))

    assert answer["ok"] is True and answer["head"] == tip
    assert (world.agent / "app.py").read_text() == "print(2)\n"
    assert git(world.agent, "diff", "--cached") == staged
    assert git(world.agent, "diff") == unstaged
    assert status(world.agent) == [
        "MM README.md", " M docs.md", "?? scratch.txt"]  # fmt: skip


def test_uncommitted_changes_in_the_way_of_the_bundle_are_refused_and_nothing_changes(
    world: World,
) -> None:
    dirty(world)
    change(world.agent, {"app.py": "print('the agent')\n"})
    commit(world.user, {"app.py": "print(2)\n"}, "two")
    before = state(world.agent)

    answer = context(world, bundle=send_bundle(world))

    assert answer == {"ok": False, "reason": "the agent's uncommitted changes are in the way: "
                      "error: Entry 'app.py' not uptodate. Cannot merge."}  # fmt: skip
    assert state(world.agent) == before
    assert not world.marker.exists()


@pytest.mark.parametrize("base", ["unpushed", "short"])
def test_a_base_commit_not_on_the_remote_is_refused_and_nothing_changes(
    world: World, base: str
) -> None:
    dirty(world)
    first = commit(world.user, {"app.py": "print(2)\n"}, "two")
    commit(world.user, {"app.py": "print(3)\n"}, "three")
    bundle = send_bundle(world)
    bundle["base_commit"] = first if base == "unpushed" else world.session_base[:12]
    before = state(world.agent)

    answer = context(world, bundle=bundle)

    assert answer == {"ok": False, "reason": (
        f"base_commit {first} is not on the remote (push it first)" if base == "unpushed"
        else f"base_commit '{world.session_base[:12]}' is not a full commit id")}  # fmt: skip
    assert state(world.agent) == before
    assert not world.marker.exists()


def test_a_base_commit_that_origin_cannot_be_fetched_for_is_refused_with_gits_message(
    world: World,
) -> None:
    git(world.user, "commit", "-q", "--allow-empty", "-m", "pushed")
    git(world.user, "push", "-q", "origin", "main")
    commit(world.user, {"app.py": "print(2)\n"}, "unpushed")
    bundle = send_bundle(world)
    gone = world.root / "gone.git"
    git(world.agent, "remote", "set-url", "origin", str(gone))
    before = state(world.agent)

    answer = context(world, bundle=bundle)

    reason = str(answer["reason"])
    assert answer["ok"] is False
    assert reason.startswith(f"base_commit {bundle['base_commit']} is not on the remote (push it "
                             f"first); git fetch origin: fatal: '{gone}' does not appear")  # fmt: skip
    assert state(world.agent) == before


def test_a_bundle_that_does_not_build_on_its_base_commit_is_refused(world: World) -> None:
    git(world.user, "checkout", "-q", "-b", "topic", world.first)
    pushed = commit(world.user, {"topic.md": "topic\n"}, "topic")
    git(world.user, "push", "-q", "-u", "origin", "topic")
    git(world.user, "checkout", "-q", "main")
    commit(world.user, {"app.py": "print(2)\n"}, "on main")
    bundle = {**send_bundle(world), "base_commit": pushed}
    before = state(world.agent)

    answer = context(world, bundle=bundle)

    assert answer == {"ok": False,
                      "reason": f"the bundle's commits do not build on base_commit {pushed}"}  # fmt: skip
    assert state(world.agent) == before


def test_a_branch_with_commits_of_its_own_the_bundle_lacks_is_refused_unchanged(
    world: World,
) -> None:
    commit(world.agent, {"agent.txt": "the agent's work\n"}, "the agent's commit")
    dirty(world)
    commit(world.user, {"app.py": "print(2)\n"}, "two")
    before = state(world.agent)

    answer = context(world, bundle=send_bundle(world))

    assert answer == {"ok": False, "reason": "the bundle's commits neither fast-forward branch "
                      "work (it has 1 commit of its own) nor start it fresh"}  # fmt: skip
    assert state(world.agent) == before


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_bundle_is_refused_with_gits_message_and_nothing_changes(
    world: World, damage: str
) -> None:
    commit(world.user, {"big.bin": os.urandom(64 * 1024)}, "two")
    bundle = send_bundle(world)
    data = Path(bundle["path"]).read_bytes()
    Path(bundle["path"]).write_bytes(b"not a bundle\n" if damage == "garbage" else data[:2000])
    dirty(world)
    before = state(world.agent)

    answer = context(world, bundle=bundle)

    reason = str(answer["reason"])
    assert answer["ok"] is False
    if damage == "garbage":
        assert reason.startswith("the bundle does not verify: ")
        assert "does not look like a v2 or v3 bundle file" in reason
    else:  # the header is whole, so it verifies; its pack ends early
        assert reason.startswith("the bundle cannot be fetched: ") and "early EOF" in reason
    assert state(world.agent) == before


# The patch ----------------------------------------------------------------------------------


def test_a_patch_is_applied_as_uncommitted_changes_nothing_staged(world: World) -> None:
    change(world.user, {"app.py": "print('changed')\n", "logo.bin": LOGO[::-1], "docs.md": None,
                        "notes/new.txt": "new\n"})  # fmt: skip

    answer = context(world, patch=send_patch(world))

    assert answer == {"ok": True, "head": world.session_base, "base": None, "moved": None,
                      "patched": True}  # fmt: skip
    assert tree(world.agent) == tree(world.user)
    assert git(world.agent, "diff", "--cached") == ""
    assert status(world.agent) == [
        " M app.py", " D docs.md", " M logo.bin", "?? notes/new.txt"]  # fmt: skip


def test_a_bundle_and_a_patch_give_the_agent_the_users_commits_and_changes(world: World) -> None:
    tip = commit(world.user, {"app.py": "print(2)\n"}, "two")
    change(world.user, {"app.py": "print(2.5)\n", "notes/new.txt": "new\n"})

    answer = context(world, bundle=send_bundle(world), patch=send_patch(world))

    assert answer == {"ok": True, "head": tip, "base": world.session_base,
                      "moved": "fresh-start", "patched": True}  # fmt: skip
    assert tree(world.agent) == tree(world.user)
    assert status(world.agent) == status(world.user) == [" M app.py", "?? notes/new.txt"]


def test_an_empty_patch_is_no_patch(world: World) -> None:
    patch = send_patch(world)
    assert Path(patch["path"]).read_bytes() == b""

    answer = context(world, patch=patch)

    assert answer == {"ok": True, "head": world.session_base, "base": None, "moved": None,
                      "patched": False}  # fmt: skip


@pytest.mark.parametrize("with_bundle", [False, True], ids=["alone", "after a bundle"])
def test_a_patch_that_does_not_apply_is_refused_with_gits_message_and_nothing_changes(
    world: World, with_bundle: bool
) -> None:
    if with_bundle:
        commit(world.user, {"app.py": "print(2)\n"}, "two")
    change(world.user, {"app.py": "print('changed')\n", "notes.txt": "the user's\n"})
    dirty(world)
    change(world.agent, {"notes.txt": "the agent's\n"})  # untracked, where the patch adds one
    before = state(world.agent)
    fields = {"bundle": send_bundle(world)} if with_bundle else {}

    answer = context(world, patch=send_patch(world), **fields)

    assert answer == {"ok": False, "reason": "the patch does not apply: "
                      "error: notes.txt: already exists in working directory"}  # fmt: skip
    assert state(world.agent) == before  # after a bundle: moved back, staged still staged
    assert not world.marker.exists()


# Running again --------------------------------------------------------------------------------


def test_a_repeat_with_the_marker_present_answers_the_same_and_changes_nothing(
    world: World,
) -> None:
    commit(world.user, {"app.py": "print(2)\n"}, "two")
    change(world.user, {"notes.txt": "new\n"})
    fields = {"bundle": send_bundle(world), "patch": send_patch(world)}
    first = context(world, **fields)
    assert first["ok"] is True
    assert world.marker.read_text() == json.dumps(first) + "\n"
    git(world.agent, "reset", "-q", "--hard", world.session_base)  # the agent undoes it all
    git(world.agent, "clean", "-q", "-fd")
    before = state(world.agent)

    again = context(world, **fields)

    assert again == first
    assert state(world.agent) == before


def test_a_repeat_without_the_marker_after_a_success_succeeds_and_changes_nothing(
    world: World,
) -> None:
    tip = commit(world.user, {"app.py": "print(2)\n"}, "two")
    change(world.user, {"app.py": "print(2.5)\n", "notes.txt": "new\n"})
    fields = {"bundle": send_bundle(world), "patch": send_patch(world)}
    assert context(world, **fields)["moved"] == "fresh-start"
    world.marker.unlink()
    before = state(world.agent)

    again = context(world, **fields)

    assert again == {"ok": True, "head": tip, "base": None, "moved": None, "patched": True}
    assert state(world.agent) == before


def test_a_marker_that_is_a_link_is_not_taken_for_an_answer(world: World) -> None:
    planted = world.root / "planted.json"
    planted.write_text('{"ok": true, "head": "planted", "base": null, "moved": null, '
                       '"patched": false}\n')  # fmt: skip
    world.marker.parent.mkdir(parents=True)
    world.marker.symlink_to(planted)
    change(world.user, {"notes.txt": "new\n"})

    answer = context(world, patch=send_patch(world))

    assert answer["head"] == world.session_base and answer["patched"] is True
    assert not world.marker.is_symlink()
    assert json.loads(world.marker.read_text()) == answer
    assert json.loads(planted.read_text())["head"] == "planted"


# What the repo's config names -----------------------------------------------------------------

HOOKS = ["post-checkout", "post-merge", "reference-transaction", "post-index-change"]


def test_the_agents_hooks_and_fsmonitor_never_run(world: World) -> None:
    ran = world.root / "ran"
    ran.mkdir()
    for name in HOOKS:
        hook = world.agent / ".git" / "hooks" / name
        hook.write_text(f"#!/bin/sh\ntouch '{ran}/{name}'\n")
        hook.chmod(0o755)
    monitor = world.root / "fsmonitor"
    monitor.write_text(f"#!/bin/sh\ntouch '{ran}/fsmonitor'\nexit 1\n")
    monitor.chmod(0o755)
    git(world.agent, "config", "core.fsmonitor", str(monitor))
    tip = commit(world.user, {"app.py": "print(2)\n"}, "two")
    change(world.user, {"notes.txt": "new\n"})

    answer = context(world, bundle=send_bundle(world), patch=send_patch(world))

    assert answer["head"] == tip and answer["patched"] is True
    assert sorted(os.listdir(ran)) == []
    # They are live: plain git on the same repo runs them.
    git(world.agent, "checkout", "-q", "-b", "probe")
    git(world.agent, "status", "--porcelain")
    assert {"post-checkout", "reference-transaction", "fsmonitor"} <= set(os.listdir(ran))


# Bad configs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "code"),
    [("not json", 2), ("a list", 2), ("no marker", 2), ("no bundle file", 2),
     ("short session_base", 2), ("no repo", 1), ("not a clone's top", 1)],
)  # fmt: skip
def test_a_bad_config_exits_non_zero_saying_why_and_prints_nothing(
    world: World, case: str, code: int
) -> None:
    commit(world.user, {"app.py": "print(2)\n"}, "two")
    bundle = send_bundle(world)
    cfg = {
        "not json": "{",
        "a list": "[]",
        "no marker": json.dumps({"repo": str(world.agent)}),
        "no bundle file": config(world, bundle={**bundle, "path": str(world.root / "nope")}),
        "short session_base": config(world, bundle=bundle, session_base="abc"),
        "no repo": config(world, repo=str(world.root / "nope")),
        "not a clone's top": config(world, repo=str(world.agent / "lib"), bundle=bundle),
    }[case]
    (world.agent / "lib").mkdir()
    before = state(world.agent)

    proc = run(cfg, world)

    assert proc.returncode == code and proc.stdout == b""
    assert proc.stderr.startswith(b"context: ")
    assert state(world.agent) == before
