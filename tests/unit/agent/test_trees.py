"""hangar/agent/trees.py on real git repos in temp folders: the trees it records rebuild the
working tree, it writes nothing into the agent's .git and runs nothing the repo names, a slow
hash stops hashing, and the patches between steps apply."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from hangar.agent.trees import Trees

from tests.conftest import git


def make_repo(root: Path, files: int = 20) -> Path:
    repo = root / "repo"
    git(root, "init", "-q", "-b", "main", str(repo))
    for i in range(files):
        path = repo / f"d{i % 3}" / f"f{i}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"file {i}\n" * 5)
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "seed")
    return repo


def new_trees(root: Path, repo: Path, **kw: float) -> Trees:
    scratch = root / "scratch"
    scratch.mkdir(exist_ok=True)
    return Trees(str(repo), str(scratch), **kw)


def rebuild(repo: Path, scratch: Path, tree: str, dest: Path) -> None:
    """Check ``tree`` out into ``dest`` with the host's git (the test's judge)."""
    env = {**os.environ, "GIT_DIR": str(repo / ".git"), "GIT_INDEX_FILE": str(dest) + ".index",
           "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(scratch / "objects")}  # fmt: skip
    dest.mkdir()
    for args in (["read-tree", tree], ["checkout-index", "-a", f"--prefix={dest}/"]):
        subprocess.run(["git", *args], env=env, check=True, capture_output=True)


def files_of(folder: Path, ignored: tuple[str, ...] = ()) -> dict[str, bytes]:
    out = {}
    for path in folder.rglob("*"):
        rel = path.relative_to(folder).as_posix()
        if rel == ".git" or rel.startswith(".git/") or path.is_dir() or rel.endswith(ignored):
            continue
        out[rel] = path.read_bytes()
    return out


def listing(folder: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(folder)), p.lstat().st_size, p.lstat().st_mtime_ns)
                  for p in folder.rglob("*"))  # fmt: skip


def test_a_recorded_tree_rebuilds_the_working_tree_with_new_and_deleted_files(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    trees = new_trees(tmp_path, repo)
    start = trees.record(None)
    assert start is not None and start["step"] == 0 and start["tool"] is None
    (repo / "d0" / "f0.txt").write_text("edited\n")
    (repo / "new dir").mkdir()
    (repo / "new dir" / "untracked.py").write_text("print('new')\n")
    (repo / "d1" / "f1.txt").unlink()
    (repo / "noise.log").write_text("ignored\n")
    line = trees.record("Bash")
    assert line is not None and line["step"] == 1 and line["tool"] == "Bash"
    assert isinstance(line["ms"], float) and line["tree"] != start["tree"]
    rebuild(repo, tmp_path / "scratch", str(line["tree"]), tmp_path / "rebuilt")
    rebuilt = files_of(tmp_path / "rebuilt")
    assert rebuilt == files_of(repo, ignored=(".log",))
    assert "new dir/untracked.py" in rebuilt and "d1/f1.txt" not in rebuilt
    assert "noise.log" not in rebuilt


def test_an_unchanged_tree_gives_no_line_and_a_change_gives_the_next_step(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    trees = new_trees(tmp_path, repo)
    first = trees.record(None)
    assert first is not None
    assert trees.record("Read") is None
    (repo / "d2" / "f2.txt").write_text("changed\n")
    second = trees.record("Edit")
    assert second is not None and second["step"] == 1 and second["tree"] != first["tree"]
    assert trees.record("Bash") is None
    (repo / "d2" / "f2.txt").write_text("changed again\n")
    third = trees.record("Bash")
    assert third is not None and third["step"] == 2


def test_the_repos_filters_and_fsmonitor_run_nothing_and_its_git_folder_is_unchanged(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    script = tmp_path / "fsmonitor.sh"
    script.write_text(f"#!/bin/sh\ntouch {markers}/fsmonitor\n")
    script.chmod(0o755)
    git(repo, "config", "filter.x.clean", f"sh -c 'touch {markers}/clean; cat'")
    git(repo, "config", "filter.x.smudge", f"sh -c 'touch {markers}/smudge; cat'")
    git(repo, "config", "core.fsmonitor", str(script))
    hook = repo / ".git" / "hooks" / "post-index-change"
    hook.write_text(f"#!/bin/sh\ntouch {markers}/hook\n")
    hook.chmod(0o755)
    (repo / ".gitattributes").write_text("*.txt filter=x\n")
    (repo / "d0" / "f0.txt").write_text("through the filter?\n")
    before = listing(repo / ".git")
    trees = new_trees(tmp_path, repo)
    assert trees.record(None) is not None
    (repo / "d0" / "f3.txt").write_text("again\n")
    (repo / "d0" / "brand new.txt").write_text("new\n")
    assert trees.record("Edit", [str(repo / "d0" / "f3.txt")]) is not None
    assert trees.record("Bash") is not None
    assert sorted(os.listdir(markers)) == []
    assert listing(repo / ".git") == before


def test_a_slow_hash_is_skipped_once_and_stops_hashing_for_the_turn(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    trees = new_trees(tmp_path, repo, slow_ms=0.001)
    line = trees.record("Bash")
    assert line is not None and line["skipped"] == "slow" and line["step"] == 0
    assert "tree" not in line and float(str(line["ms"])) > 0.001
    (repo / "d0" / "f0.txt").write_text("changed\n")
    assert trees.record("Bash") is None
    assert trees.record("Edit", ["d0/f0.txt"]) is None


def test_the_paths_of_an_edit_give_the_same_tree_as_a_whole_hash(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    trees = new_trees(tmp_path, repo)
    assert trees.record(None) is not None
    (repo / "d1" / "f4.txt").write_text("edited by Edit\n")
    (repo / "d2" / "made.txt").write_text("made by Write\n")
    calls: list[tuple[str, ...]] = []
    run_git = trees._git

    def logged(*args: str, **kw: object) -> tuple[int, bytes, bytes]:
        calls.append(args)
        return run_git(*args, **kw)  # type: ignore[arg-type]

    trees._git = logged  # type: ignore[method-assign]
    fast = trees.record("Write", [str(repo / "d1" / "f4.txt"), "d2/made.txt"])
    assert fast is not None
    assert calls == [("add", "-A", "--", "d1/f4.txt", "d2/made.txt"), ("write-tree", "--missing-ok")]
    (tmp_path / "other").mkdir()
    whole = Trees(str(repo), str(tmp_path / "other")).record(None)
    assert whole is not None and whole["tree"] == fast["tree"]


def test_paths_outside_the_repo_or_ignored_fall_back_to_the_whole_hash(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    trees = new_trees(tmp_path, repo)
    assert trees.record(None) is not None
    (repo / "d0" / "f6.txt").write_text("changed by a shell\n")
    (repo / "named.log").write_text("ignored, named by the tool\n")
    line = trees.record("Write", [str(repo / "named.log"), "/etc/hostname", ".git/config"])
    assert line is not None
    rebuild(repo, tmp_path / "scratch", str(line["tree"]), tmp_path / "rebuilt")
    assert files_of(tmp_path / "rebuilt") == files_of(repo, ignored=(".log",))
    hostile: list[list[object]] = [["d0/f7.txt\0x"], [7], ["d0/f8.txt"] * 500, ["d0/../.GIT/x"]]
    for n, paths in enumerate(hostile):
        (repo / "d1" / f"shell{n}.txt").write_text("a shell wrote this\n")
        line = trees.record("Write", paths)  # type: ignore[arg-type]
        assert line is not None and "tree" in line, line
        rebuild(repo, tmp_path / "scratch", str(line["tree"]), tmp_path / f"rebuilt{n}")
        assert files_of(tmp_path / f"rebuilt{n}") == files_of(repo, ignored=(".log",))


def test_a_patch_between_two_steps_applies_and_a_cap_cuts_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    trees = new_trees(tmp_path, repo)
    first = trees.record(None)
    assert first is not None
    (repo / "d0" / "f0.txt").write_text("edited\n")
    (repo / "bin.dat").write_bytes(bytes(range(256)) * 4)
    (repo / "d1" / "f1.txt").unlink()
    second = trees.record("Bash")
    assert second is not None
    patch, cut = trees.patch(str(first["tree"]), str(second["tree"]), 1 << 20)
    assert not cut and b"GIT binary patch" in patch
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)
    git(copy, "checkout", "-q", "--", ".")
    git(copy, "clean", "-qfd")
    (copy / "patch.diff").write_bytes(patch)
    git(copy, "apply", "--check", "patch.diff")
    git(copy, "apply", "patch.diff")
    (copy / "patch.diff").unlink()
    assert files_of(copy) == files_of(repo)
    small, cut = trees.patch(str(first["tree"]), str(second["tree"]), len(patch) - 10)
    assert cut and len(small) < len(patch) - 10 and patch.startswith(small)


def test_an_index_git_cannot_read_or_hidden_changes_still_give_the_working_tree(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    git(repo, "update-index", "--assume-unchanged", "d0/f0.txt")
    (repo / "d0" / "f0.txt").write_text("hidden from git status\n")
    line = new_trees(tmp_path, repo).record(None)
    assert line is not None
    rebuild(repo, tmp_path / "scratch", str(line["tree"]), tmp_path / "hidden")
    assert (tmp_path / "hidden" / "d0" / "f0.txt").read_text() == "hidden from git status\n"
    (repo / ".git" / "index").write_bytes(b"DIRC garbage the agent wrote")
    (repo / "d2" / "f5.txt").write_text("edited\n")
    (tmp_path / "again").mkdir()
    line = Trees(str(repo), str(tmp_path / "again")).record(None)
    assert line is not None and "tree" in line, line
    rebuild(repo, tmp_path / "again", str(line["tree"]), tmp_path / "rebuilt")
    assert files_of(tmp_path / "rebuilt") == files_of(repo)


def test_a_file_the_agent_made_unreadable_keeps_its_last_entry_and_hashing_goes_on(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    (repo / "d1" / "f1.txt").write_text("edited\n")
    (repo / "d0" / "f0.txt").write_text("changed, then hidden\n")
    (repo / "d0" / "f0.txt").chmod(0o000)
    record = ("import json, sys; from hangar.agent.trees import Trees; "
              "print(json.dumps(Trees(sys.argv[1], sys.argv[2]).record('start')))")  # fmt: skip
    # as hangar's user in a sandbox: root without the capabilities that pass file modes
    out = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search",
                          sys.executable, "-c", record, str(repo), str(tmp_path / "scratch")],
                         capture_output=True, text=True, check=True)  # fmt: skip
    line = json.loads(out.stdout)
    assert "tree" in line and "skipped" not in line, line
    rebuild(repo, tmp_path / "scratch", str(line["tree"]), tmp_path / "rebuilt")
    assert (tmp_path / "rebuilt" / "d1" / "f1.txt").read_text() == "edited\n"
    assert (tmp_path / "rebuilt" / "d0" / "f0.txt").read_text() == "file 0\n" * 5  # as it was
