"""Pieces of hangar/agent/checkpoint.py and gitsafe.py that the agent's leftovers exercise, run on
scratch git repos: the index hangar writes itself, the shared index of a split index, and how
names that are not UTF-8 and floods of warnings reach the manifest."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hangar.agent.checkpoint import MAX_WARNINGS, manifest_warnings, new_files_index, patch_stat
from hangar.agent.gitsafe import linked_shared_index
from hangar.agent.paths import readable
from tests.conftest import git


def run_git(repo: Path, *args: str, index: Path | None = None) -> bytes:
    env = {**os.environ, "GIT_INDEX_FILE": str(index)} if index else None
    return subprocess.run(["git", "-C", str(repo), "-c", "core.quotepath=false", *args], capture_output=True, check=True,
                          env=env).stdout  # fmt: skip


def test_a_name_that_is_not_utf8_is_shown_escaped_and_the_manifest_stays_json() -> None:
    name = os.fsdecode(b"d\xfe/f\xff \xc3\xa9")  # two bytes that are not UTF-8, one letter that is
    assert readable(name) == "d\\xfe/f\\xff é"
    [warning] = manifest_warnings([f"special files left out: {name} is a FIFO"])
    assert json.loads(json.dumps(warning).encode().decode("utf-8")) == warning


def test_the_change_size_counts_as_git_numstat_does_lines_that_look_like_headers_too(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    run_git(repo, "init", "-q")
    (repo / "f").write_text("a\n-- b\nc\n")
    (repo / "blob").write_bytes(b"\x00\x01")
    run_git(repo, "add", ".")
    run_git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    (repo / "f").write_text("a\n++ plus\nc\nd")  # a line read as "+++", no newline at the end
    (repo / "blob").write_bytes(b"\x00\x02")
    (repo / "new").write_text("1\n2\n")
    run_git(repo, "add", "-N", "new")
    patch = tmp_path / "session.patch"
    patch.write_bytes(run_git(repo, "diff", "--binary"))
    numstat = [line.split("\t") for line in run_git(repo, "diff", "--numstat").decode().splitlines()]
    assert patch_stat(str(patch)) == {
        "files": len(numstat),
        "added": sum(int(a) for a, _, _ in numstat if a != "-"),
        "removed": sum(int(r) for _, r, _ in numstat if r != "-"),
    } == {"files": 3, "added": 4, "removed": 1}


def test_warnings_are_bounded_in_number_and_length() -> None:
    shown = manifest_warnings(["x" * 100_000] + [f"w{i}" for i in range(500)])
    assert len(shown) == MAX_WARNINGS + 1 and shown[-1] == f"and {501 - MAX_WARNINGS} more warnings"
    assert len(shown[0]) < 2100 and shown[0].endswith("[cut short]")


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_the_shared_index_of_a_split_index_is_found_in_every_index_version(
    tmp_path: Path, version: str
) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    for i in range(20):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
    git(repo, "add", ".")
    assert linked_shared_index(str(repo / ".git" / "index"), 20) is None  # not split
    git(repo, "update-index", "--index-version", version)
    git(repo, "update-index", "--split-index")
    if version == "3":  # git writes version 2 unless an entry needs the extended flags
        (repo / "later.txt").write_text("later\n")
        git(repo, "add", "-N", "later.txt")
    (repo / "f3.txt").write_text("changed\n")
    git(repo, "add", "f3.txt")
    assert (repo / ".git" / "index").read_bytes()[4:8] == int(version).to_bytes(4, "big")
    name = linked_shared_index(str(repo / ".git" / "index"), 20)
    assert name and (repo / ".git" / f"sharedindex.{name}").is_file()


@pytest.mark.parametrize("object_format", ["sha1", "sha256"])
def test_the_index_of_new_files_reads_in_git_as_intent_to_add(
    tmp_path: Path, object_format: str
) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", f"--object-format={object_format}", str(repo))
    (repo / "run.sh").write_bytes(b"#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "d").mkdir()
    (repo / "d" / os.fsdecode(b"\xffname")).write_bytes(b"raw\n")
    (repo / "link").symlink_to("run.sh")
    (repo / "pipe").mkdir()  # a folder: not a file, left out
    paths = ["run.sh", os.fsdecode(b"d/\xffname"), "link", "pipe", "gone.txt"]
    index = tmp_path / "index"
    hash_len = 40 if object_format == "sha1" else 64
    assert new_files_index(str(index), str(repo), paths, hash_len) == 3
    listed = run_git(repo, "ls-files", "--stage", "-z", index=index).split(b"\0")
    assert [entry.split(b"\t")[1] for entry in listed if entry] == [b"d/\xffname", b"link", b"run.sh"]
    patch = run_git(repo, "diff", "--binary", index=index)
    assert patch.count(b"\nnew file mode ") == 3
    assert b"new file mode 100755" in patch and b"new file mode 120000" in patch
    assert b"+++ b/d/\xffname\n@@ -0,0 +1 @@\n+raw\n" in patch
