"""hangar.cli.localgit on real git repos under tmp_path.

Each world has a bare ``origin`` with one pushed commit on main; a ``sandbox`` clone plays the
session (commits after the base, uncommitted edits, new untracked files) and :func:`package`
builds its PullPackage the way the server does; a ``laptop`` clone is the user's checkout.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from hangar.cli.localgit import LocalWork, PullPackage, apply_pull, from_local
from hangar.errors import InvalidInput

from tests.conftest import GIT_IDENTITY

BINARY = bytes(range(256)) * 4


@pytest.fixture(autouse=True)
def hermetic_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No system or user git config, an identity, and no repo above tmp_path."""
    config = tmp_path / "gitconfig"
    config.write_text("[init]\n\tdefaultBranch = main\n")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for key, value in GIT_IDENTITY.items():
        monkeypatch.setenv(key, value)


def run(cwd: Path, *args: str, index: Path | None = None) -> bytes:
    env = {**os.environ, **({"GIT_INDEX_FILE": str(index)} if index else {})}
    proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, env=env, check=False)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr.decode()}"
    return proc.stdout


def git(cwd: Path, *args: str) -> str:
    return run(cwd, *args).decode().strip()


def commit(repo: Path, files: dict[str, bytes | None], message: str) -> str:
    """Commit exactly ``files`` (None deletes one); other changes stay uncommitted."""
    write(repo, files)
    git(repo, "add", "-A", "-f", "--", *files)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def write(repo: Path, files: dict[str, bytes | None]) -> None:
    for name, data in files.items():
        path = repo / name
        if data is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


def tree_files(repo: Path, *, skip: tuple[str, ...] = ()) -> dict[str, tuple[bytes, bool]]:
    """Every file under ``repo`` outside .git: its bytes and whether it is executable."""
    files = {}
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo).as_posix()
        if rel == ".git" or rel.startswith(".git/") or rel in skip or not path.is_file():
            continue
        files[rel] = (path.read_bytes(), os.access(path, os.X_OK))
    return files


def repo_state(repo: Path) -> dict[str, object]:
    """Everything a read-only operation must leave as it was."""
    return {
        "index": hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest(),
        "staged": run(repo, "ls-files", "--stage", "-z"),
        "status": run(repo, "status", "--porcelain", "-z", "--untracked-files=all"),
        "refs": git(repo, "for-each-ref"),
        "head": git(repo, "symbolic-ref", "-q", "HEAD"),
        "stash": git(repo, "stash", "list"),
        "files": tree_files(repo),
    }


def clone(origin: Path, into: Path) -> Path:
    git(origin.parent, "clone", "-q", str(origin), str(into))
    return into


def package(sandbox: Path, base: str, *, patch_base: str = "base") -> PullPackage:
    """The sandbox's checkpoint as the server packs it."""
    git(sandbox, "update-ref", "refs/hangar/checkpoint", "HEAD")
    head = git(sandbox, "rev-parse", "HEAD")
    scratch = sandbox.parent / f"pack-{head[:8]}-{patch_base}"
    scratch.mkdir(exist_ok=True)
    bundle = None
    if head != base:
        path = scratch / "f.bundle"
        git(sandbox, "bundle", "create", "-q", str(path), "refs/hangar/checkpoint", "--not", base)
        bundle = path.read_bytes()
    index = scratch / "index"
    run(sandbox, "read-tree", "HEAD", index=index)
    run(sandbox, "add", "-A", index=index)
    since = base if patch_base == "base" else head
    patch = run(sandbox, "diff", "--cached", "--binary", since, index=index) or None
    return PullPackage(
        head=head, base=base, bundle=bundle, patch=patch, patch_base=patch_base, warnings=[]
    )


@dataclass
class World:
    origin: Path
    sandbox: Path
    laptop: Path
    base: str


@pytest.fixture
def world(tmp_path: Path) -> World:
    origin = tmp_path / "origin"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = clone(origin, tmp_path / "seed")
    base = commit(
        seed,
        {"README.md": b"hello\n", "src/app.py": b"print('v1')\n", ".gitignore": b"*.log\n"},
        "base",
    )
    git(seed, "push", "-q", "origin", "main")
    sandbox = clone(origin, tmp_path / "sandbox")
    laptop = clone(origin, tmp_path / "laptop")
    return World(origin=origin, sandbox=sandbox, laptop=laptop, base=base)


def session_work(sandbox: Path) -> None:
    """Two commits after the base, then uncommitted edits and a new untracked file."""
    commit(sandbox, {"src/app.py": b"print('v2')\n", "data.bin": BINARY}, "session 1")
    commit(sandbox, {"docs/guide.md": b"# guide\n", "README.md": None}, "session 2")
    write(sandbox, {"src/app.py": b"print('v3, uncommitted')\n", "notes/new.txt": b"new\n"})
    (sandbox / "docs" / "guide.md").chmod(0o755)


# -- from_local ---------------------------------------------------------------------------------


def test_from_local_bundle_and_patch_rebuild_the_same_tree_in_another_clone(world: World) -> None:
    laptop = world.laptop
    commit(laptop, {"src/app.py": b"print('local')\n", "bin/tool": BINARY}, "local 1")
    commit(laptop, {"README.md": None, "lib.py": b"x = 1\n"}, "local 2")
    write(laptop, {"lib.py": b"x = 2\n", "staged.txt": b"staged\n"})
    git(laptop, "add", "staged.txt")
    write(laptop, {"staged.txt": b"staged, then edited\n", "untracked/new.txt": b"fresh\n"})
    write(laptop, {"debug.log": b"ignored\n", "src/app.py": None})
    (laptop / "lib.py").chmod(0o755)

    work = from_local(laptop)

    assert work.base_commit == world.base
    assert work.bundle is not None and work.patch is not None
    assert b"debug.log" not in work.patch
    box = clone(world.origin, world.origin.parent / "box")
    bundle = box.parent / "work.bundle"
    bundle.write_bytes(work.bundle)
    git(box, "fetch", "-q", str(bundle), "HEAD:refs/heads/work")
    git(box, "checkout", "-q", "work")
    assert git(box, "rev-parse", "HEAD") == git(laptop, "rev-parse", "HEAD")
    patch = box.parent / "work.patch"
    patch.write_bytes(work.patch)
    git(box, "apply", "--binary", str(patch))
    assert tree_files(box) == tree_files(laptop, skip=("debug.log",))


def test_from_local_leaves_the_index_working_tree_refs_and_stash_untouched(world: World) -> None:
    laptop = world.laptop
    commit(laptop, {"a.txt": b"a\n"}, "local")
    write(laptop, {"stashed.txt": b"s\n"})
    git(laptop, "stash", "push", "-q", "-u")
    write(laptop, {"a.txt": b"a, staged\n"})
    git(laptop, "add", "a.txt")
    write(laptop, {"a.txt": b"a, staged, edited\n", "README.md": None, "u.txt": b"u\n"})
    before = repo_state(laptop)

    work = from_local(laptop)

    assert work.patch is not None and b"u.txt" in work.patch and b"README.md" in work.patch
    assert repo_state(laptop) == before


def test_from_local_on_a_pushed_clean_checkout_gives_no_bundle_and_no_patch(world: World) -> None:
    work = from_local(world.laptop)

    assert work == LocalWork(
        bundle=None,
        base_commit=world.base,
        patch=None,
        notes=["no unpushed commits", "no uncommitted changes"],
    )


def test_from_local_refuses_a_branch_with_no_upstream(world: World) -> None:
    git(world.laptop, "switch", "-q", "-c", "topic")
    commit(world.laptop, {"t.txt": b"t\n"}, "topic")

    with pytest.raises(InvalidInput, match=r"branch topic has no upstream.*git push -u origin topic"):
        from_local(world.laptop)


def test_from_local_refuses_a_base_that_is_not_pushed(world: World) -> None:
    laptop = world.laptop
    git(laptop, "switch", "-q", "-c", "local-base")
    local_base = commit(laptop, {"lb.txt": b"local only\n"}, "local base")
    git(laptop, "switch", "-q", "-c", "topic")
    git(laptop, "branch", "-q", "--set-upstream-to", "local-base")
    commit(laptop, {"t.txt": b"t\n"}, "topic")

    with pytest.raises(InvalidInput, match="is not pushed") as caught:
        from_local(laptop)
    assert local_base[:12] in caught.value.message
    assert caught.value.data["base"] == local_base


def test_from_local_refuses_a_folder_that_is_not_a_git_checkout(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()

    with pytest.raises(InvalidInput, match="is not a git checkout"):
        from_local(plain)


# -- apply_pull ---------------------------------------------------------------------------------


def test_pull_onto_a_clean_clone_creates_the_branch_and_leaves_the_current_branch_alone(
    world: World,
) -> None:
    session_work(world.sandbox)
    pkg = package(world.sandbox, world.base)
    before = repo_state(world.laptop)

    outcome = apply_pull(world.laptop, "fix-1", pkg, checkout=False, force=False)

    assert (outcome.branch, outcome.head, outcome.moved) == ("hangar/fix-1", pkg.head, "created")
    assert not outcome.checked_out and not outcome.applied
    assert any("--checkout" in note for note in outcome.notes)
    laptop = world.laptop
    assert git(laptop, "rev-parse", "refs/heads/hangar/fix-1") == pkg.head
    assert git(laptop, "log", "--format=%s", "main..hangar/fix-1").split("\n") == [
        "session 2",
        "session 1",
    ]
    after = repo_state(laptop)
    assert after["refs"] != before["refs"]
    assert {k: v for k, v in after.items() if k != "refs"} == {
        k: v for k, v in before.items() if k != "refs"
    }
    assert git(laptop, "for-each-ref", "refs/hangar-pull/") == ""
    assert not (laptop / ".git" / "FETCH_HEAD").exists()


@pytest.mark.parametrize("patch_base", ["base", "head"])
def test_pull_with_checkout_switches_to_the_branch_and_applies_the_uncommitted_changes(
    world: World, patch_base: str
) -> None:
    session_work(world.sandbox)
    pkg = package(world.sandbox, world.base, patch_base=patch_base)

    outcome = apply_pull(world.laptop, "fix-1", pkg, checkout=True, force=False)

    laptop = world.laptop
    assert outcome.checked_out and outcome.applied and outcome.moved == "created"
    assert git(laptop, "symbolic-ref", "HEAD") == "refs/heads/hangar/fix-1"
    assert git(laptop, "rev-parse", "HEAD") == pkg.head
    assert tree_files(laptop) == tree_files(world.sandbox)
    assert git(laptop, "ls-files", "--others", "--exclude-standard") == "notes/new.txt"
    assert git(laptop, "diff", "--name-only") == "docs/guide.md\nsrc/app.py"
    assert git(laptop, "for-each-ref", "refs/hangar-pull/") == ""


def test_pull_with_checkout_refuses_an_untracked_file_where_the_session_creates_one(
    world: World,
) -> None:
    session_work(world.sandbox)
    pkg = package(world.sandbox, world.base)
    write(world.laptop, {"notes/new.txt": b"mine, do not touch\n"})
    before = repo_state(world.laptop)

    with pytest.raises(InvalidInput, match=r"overwrite 1 untracked.*notes/new\.txt") as caught:
        apply_pull(world.laptop, "fix-1", pkg, checkout=True, force=False)

    assert caught.value.data["paths"] == ["notes/new.txt"]
    assert repo_state(world.laptop) == before
    assert (world.laptop / "notes" / "new.txt").read_bytes() == b"mine, do not touch\n"


def test_pull_with_checkout_refuses_an_ignored_file_where_a_session_commit_writes(
    world: World,
) -> None:
    commit(world.sandbox, {"build.log": b"committed by the session\n"}, "force-add a log")
    pkg = package(world.sandbox, world.base)
    write(world.laptop, {"build.log": b"my local log\n"})
    before = repo_state(world.laptop)

    with pytest.raises(InvalidInput, match=r"build\.log \(ignored\)"):
        apply_pull(world.laptop, "fix-1", pkg, checkout=True, force=False)

    assert repo_state(world.laptop) == before
    assert (world.laptop / "build.log").read_bytes() == b"my local log\n"


def test_pull_with_checkout_refuses_uncommitted_changes_to_tracked_files(world: World) -> None:
    session_work(world.sandbox)
    pkg = package(world.sandbox, world.base)
    write(world.laptop, {"README.md": b"edited here\n"})
    before = repo_state(world.laptop)

    with pytest.raises(InvalidInput, match="commit or stash them first"):
        apply_pull(world.laptop, "fix-1", pkg, checkout=True, force=False)

    assert repo_state(world.laptop) == before


def test_a_diverged_branch_is_refused_without_force_and_moved_with_force(world: World) -> None:
    session_work(world.sandbox)
    pkg = package(world.sandbox, world.base)
    laptop = world.laptop
    apply_pull(laptop, "fix-1", pkg, checkout=False, force=False)
    git(laptop, "switch", "-q", "hangar/fix-1")
    own = commit(laptop, {"mine.txt": b"mine\n"}, "my own commit")
    git(laptop, "switch", "-q", "main")

    with pytest.raises(InvalidInput, match="has 1 commit\\(s\\) of its own"):
        apply_pull(laptop, "fix-1", pkg, checkout=False, force=False)
    assert git(laptop, "rev-parse", "hangar/fix-1") == own

    outcome = apply_pull(laptop, "fix-1", pkg, checkout=False, force=True)
    assert outcome.moved == "forced"
    assert git(laptop, "rev-parse", "hangar/fix-1") == pkg.head
    assert git(laptop, "symbolic-ref", "HEAD") == "refs/heads/main"


def test_a_second_pull_after_more_session_commits_fast_forwards(world: World) -> None:
    session_work(world.sandbox)
    first = package(world.sandbox, world.base)
    apply_pull(world.laptop, "fix-1", first, checkout=False, force=False)
    commit(world.sandbox, {"more.txt": b"more\n"}, "session 3")
    second = package(world.sandbox, world.base)

    outcome = apply_pull(world.laptop, "fix-1", second, checkout=False, force=False)

    assert outcome.moved == "fast-forward" and second.head != first.head
    assert git(world.laptop, "rev-parse", "hangar/fix-1") == second.head
    again = apply_pull(world.laptop, "fix-1", second, checkout=False, force=False)
    assert again.moved == "unchanged"


def test_the_current_branch_is_not_moved_without_checkout_and_is_moved_with_it(
    world: World,
) -> None:
    session_work(world.sandbox)
    apply_pull(world.laptop, "fix-1", package(world.sandbox, world.base), checkout=False,
               force=False)  # fmt: skip
    git(world.laptop, "switch", "-q", "hangar/fix-1")
    commit(world.sandbox, {"more.txt": b"more\n"}, "session 3")
    pkg = package(world.sandbox, world.base)
    before = repo_state(world.laptop)

    with pytest.raises(InvalidInput, match="is the checked-out branch"):
        apply_pull(world.laptop, "fix-1", pkg, checkout=False, force=False)
    assert repo_state(world.laptop) == before

    outcome = apply_pull(world.laptop, "fix-1", pkg, checkout=True, force=False)
    assert (outcome.moved, outcome.applied) == ("fast-forward", True)
    assert git(world.laptop, "rev-parse", "HEAD") == pkg.head
    assert git(world.laptop, "symbolic-ref", "HEAD") == "refs/heads/hangar/fix-1"
    assert tree_files(world.laptop) == tree_files(world.sandbox)


def test_a_bundle_whose_base_is_not_here_is_refused_with_fetch_advice(world: World) -> None:
    new_base = commit(world.sandbox, {"pushed-later.txt": b"p\n"}, "pushed after the clone")
    git(world.sandbox, "push", "-q", "origin", "main")
    commit(world.sandbox, {"s.txt": b"s\n"}, "session")
    pkg = package(world.sandbox, new_base)
    before = repo_state(world.laptop)

    with pytest.raises(InvalidInput, match=f"git fetch.*base {new_base[:12]} is not here"):
        apply_pull(world.laptop, "fix-1", pkg, checkout=False, force=False)
    assert repo_state(world.laptop) == before

    git(world.laptop, "fetch", "-q")
    outcome = apply_pull(world.laptop, "fix-1", pkg, checkout=False, force=False)
    assert outcome.moved == "created"


def test_a_session_without_commits_pulls_its_base_and_applies_its_changes(world: World) -> None:
    write(world.sandbox, {"README.md": b"edited in the session\n", "new.bin": BINARY})
    pkg = package(world.sandbox, world.base)
    assert pkg.bundle is None and pkg.head == world.base

    outcome = apply_pull(world.laptop, "fix-1", pkg, checkout=True, force=False)

    assert (outcome.moved, outcome.checked_out, outcome.applied) == ("created", True, True)
    assert git(world.laptop, "rev-parse", "HEAD") == world.base
    assert tree_files(world.laptop) == tree_files(world.sandbox)


def test_checkout_without_a_patch_checks_out_and_says_there_was_nothing_to_apply(
    world: World,
) -> None:
    commit(world.sandbox, {"s.txt": b"s\n"}, "session")
    pkg = package(world.sandbox, world.base)
    pkg = PullPackage(pkg.head, pkg.base, pkg.bundle, None, "base", ["checkpoint is partial"])

    outcome = apply_pull(world.laptop, "fix-1", pkg, checkout=True, force=False)

    assert outcome.checked_out and not outcome.applied
    assert outcome.notes == ["checkpoint is partial", "the session has no uncommitted changes"]
    assert git(world.laptop, "rev-parse", "HEAD") == pkg.head


def test_a_name_that_cannot_be_a_branch_is_refused(world: World) -> None:
    commit(world.sandbox, {"s.txt": b"s\n"}, "session")
    pkg = package(world.sandbox, world.base)

    with pytest.raises(InvalidInput, match="cannot name a branch"):
        apply_pull(world.laptop, "bad..name", pkg, checkout=False, force=False)
    assert git(world.laptop, "for-each-ref", "refs/heads/hangar/") == ""


def test_a_bundle_that_does_not_hold_the_head_is_refused(world: World) -> None:
    commit(world.sandbox, {"s.txt": b"s\n"}, "session")
    pkg = package(world.sandbox, world.base)
    other = commit(world.sandbox, {"t.txt": b"t\n"}, "later")
    wrong = PullPackage(other, pkg.base, pkg.bundle, None, "base", [])

    with pytest.raises(InvalidInput, match="does not hold refs/hangar/checkpoint"):
        apply_pull(world.laptop, "fix-1", wrong, checkout=False, force=False)
    assert git(world.laptop, "for-each-ref", "refs/heads/hangar/", "refs/hangar-pull/") == ""
