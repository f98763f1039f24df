"""hangar.checkpoints.rebuild: a format-2 tree part back into the plain tar the restore reads.

The trees here are listings built by hand or read from a folder on disk; the last test runs the
installed restore script on a rebuilt tree and on GNU tar's archive of the same folder.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hangar.errors import DecryptionFailed
from hangar.checkpoints.manifest import TreeEntry
from hangar.checkpoints.rebuild import END, header, tree_tar
from tests.unit.agent.test_restore_script import World, restore, snapshot
from tests.unit.agent.test_restore_script import world as restore_world  # noqa: F401 (fixture)

SECOND = 1_000_000_000
KINDS = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE}
Contents = Callable[[TreeEntry], Iterator[bytes]]


def file(path: bytes, data: bytes, mode: int = 0o644, mtime_ns: int = 1_700_000_000 * SECOND,
         ) -> tuple[TreeEntry, bytes]:  # fmt: skip
    return TreeEntry(path=path, kind="file", mode=mode, mtime_ns=mtime_ns, size=len(data)), data


def folder(path: bytes, mode: int = 0o755, mtime_ns: int = 1_600_000_000 * SECOND) -> TreeEntry:
    return TreeEntry(path=path, kind="dir", mode=mode, mtime_ns=mtime_ns)


def link(path: bytes, target: bytes, mtime_ns: int = 1_500_000_000 * SECOND) -> TreeEntry:
    return TreeEntry(path=path, kind="symlink", mode=0o777, mtime_ns=mtime_ns, target=target)


def served(files: dict[bytes, bytes], piece: int = 7) -> Contents:
    """Contents from memory, each file in pieces of ``piece`` bytes (the last one shorter)."""

    def contents(entry: TreeEntry) -> Iterator[bytes]:
        data = files[entry.path]
        for at in range(0, len(data), piece):
            yield data[at : at + piece]

    return contents


def rebuilt(entries: list[TreeEntry], contents: Contents) -> bytes:
    size, stream = tree_tar(entries, contents)
    data = b"".join(stream)
    assert len(data) == size
    return data


def read_back(data: bytes) -> list[tuple[bytes, bytes, int, int, bytes, bytes | None]]:
    """Every member as the restore's tarfile reads it (its default encoding and errors), names
    and targets turned back into the bytes they make on disk."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        for m in tf.getmembers():
            body = tf.extractfile(m).read() if m.isfile() else None  # type: ignore[union-attr]
            out.append((os.fsencode(m.name), m.type, m.mode, int(m.mtime), os.fsencode(m.linkname),
                        body))  # fmt: skip
    return out


def expected(entries: list[TreeEntry], files: dict[bytes, bytes]) -> list[tuple[object, ...]]:
    return [(e.path, KINDS[e.kind], e.mode, e.mtime_ns // SECOND, e.target or b"",
             files.get(e.path) if e.kind == "file" else None) for e in entries]  # fmt: skip


def tree(
    pairs: list[tuple[TreeEntry, bytes] | TreeEntry],
) -> tuple[list[TreeEntry], dict[bytes, bytes]]:
    entries: list[TreeEntry] = []
    files: dict[bytes, bytes] = {}
    for pair in pairs:
        if isinstance(pair, tuple):
            entries.append(pair[0])
            files[pair[0].path] = pair[1]
        else:
            entries.append(pair)
    return entries, files


def test_a_rebuilt_tree_reads_back_as_the_same_members_modes_times_targets_and_contents() -> None:
    entries, files = tree([
        folder(b"notes", mode=0o750),
        file(b"notes/todo.txt", b"todo\n" * 300, mode=0o640,
             mtime_ns=1_700_000_000 * SECOND + 999_999_999),
        file(b"notes/run.sh", b"#!/bin/sh\n", mode=0o755),
        link(b"notes/latest", b"todo.txt"),
        link(b"guide", b"notes/../docs/guide.md"),
        folder(b"notes/deep/er", mode=0o700),
        file(b"notes/deep/er/block", bytes(range(256)) * 4, mode=0o600),  # exactly two blocks
    ])  # fmt: skip

    data = rebuilt(entries, served(files))

    assert read_back(data) == expected(entries, files)
    assert read_back(data)[1][3] == 1_700_000_000  # the nanoseconds cut off, as GNU tar does
    assert data.endswith(END) and len(data) % 512 == 0


@pytest.mark.parametrize("piece", [100, 512, 1 << 16, 3 << 20])
def test_the_size_announced_is_the_bytes_yielded_however_the_contents_come(piece: int) -> None:
    rng = random.Random(piece)
    entries, files = tree([
        folder(b"d"),
        *[file(b"d/f%d" % i, rng.randbytes(rng.choice([0, 1, 511, 512, 513, 5000])))
          for i in range(40)],
        file(b"d/big", rng.randbytes((5 << 20) + 3)),  # past the runs small pieces are joined in
        link(b"d/l", b"f1"),
    ])  # fmt: skip

    size, stream = tree_tar(entries, served(files, piece))
    pieces = list(stream)

    assert sum(map(len, pieces)) == size
    assert read_back(b"".join(pieces)) == expected(entries, files)
    assert max(map(len, pieces)) < max(piece, 1 << 20) + (1 << 20)  # bounded, whatever the tree


def test_an_empty_tree_is_the_two_end_blocks() -> None:
    size, stream = tree_tar([], served({}))
    assert (size, b"".join(stream)) == (1024, bytes(1024))


def test_an_empty_file_is_its_header_alone_and_its_contents_may_yield_nothing() -> None:
    entries, files = tree([file(b"empty", b""), file(b"after", b"x")])

    def contents(entry: TreeEntry) -> Iterator[bytes]:
        yield from [b""] if entry.path == b"empty" else [b"", files[entry.path], b""]

    size, stream = tree_tar(entries, contents)
    data = b"".join(stream)
    assert size == len(data) == 512 + 512 + 512 + 1024
    assert read_back(data) == expected(entries, files)


LONG = [
    b"a" * 99,  # a folder: 100 bytes with its slash
    b"b" * 100,
    b"c" * 101,
    b"/".join([b"long-folder-name-" * 5] * 3) + b"/file",  # over 255 bytes
    b"/".join([b"x" * 200] * 20),  # 4 KiB
]
NAMES = [
    b"caf\xe9.txt",  # Latin-1: not UTF-8
    b"d\xfe/f\xff",
    "café ☕".encode(),
    b"\xed\xa0\x80",  # an encoded surrogate: not UTF-8 either
    b"x" * 150 + b"\xff",  # long and not UTF-8
]


@pytest.mark.parametrize("path", LONG + NAMES)
@pytest.mark.parametrize("kind", ["file", "dir", "symlink"])
def test_long_paths_and_names_that_are_not_utf8_come_back_byte_for_byte(
    path: bytes, kind: str
) -> None:
    if kind == "file":
        entries, files = tree([file(path, b"contents\n")])
    elif kind == "dir":
        entries, files = tree([folder(path)])
    else:  # the path as the target too: a link target is kept byte for byte as well
        entries, files = tree([link(path, path)])

    data = rebuilt(entries, served(files))

    assert read_back(data) == expected(entries, files)


def test_sizes_and_times_past_what_a_ustar_header_holds_go_in_pax_records() -> None:
    huge = 8**11 + 5  # over 8 GiB: announced, though no test yields its bytes
    entries = [
        TreeEntry(path=b"huge", kind="file", mode=0o600, mtime_ns=0, size=huge),
        folder(b"future", mtime_ns=8**12 * SECOND + 1),
    ]
    size, _ = tree_tar(entries, served({}))
    heads = [header(e) for e in entries]
    assert size == sum(map(len, heads)) + huge + (-huge % 512) + 1024
    members = []
    for head in heads:  # each alone: tarfile would look for the huge file's bytes
        with tarfile.open(fileobj=io.BytesIO(head), mode="r:") as tf:
            members.append(tf.next())
    assert all(len(head) > 512 for head in heads)  # a pax record before each ustar block
    assert members[0] and members[0].size == huge and members[0].isfile()
    assert members[1] and members[1].mtime == 8**12 and members[1].isdir()


@pytest.mark.parametrize("seed", range(5))
def test_each_header_is_the_bytes_tarfile_writes_for_the_member(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "abcXYZ019._-/ ~"
    for _ in range(400):
        kind = rng.choice(["file", "dir", "symlink"])
        path = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120))).encode()
        target = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120))).encode()
        entry = TreeEntry(
            path=path, kind=kind, mode=rng.randint(0, 0o7777),  # type: ignore[arg-type]
            mtime_ns=rng.choice([0, rng.randint(0, 2**40 * SECOND)]),
            size=rng.choice([0, 1, rng.randint(0, 2**40)]) if kind == "file" else 0,
            target=target if kind == "symlink" else None,
        )  # fmt: skip
        info = tarfile.TarInfo(path.decode() + ("/" if kind == "dir" else ""))
        info.type = KINDS[kind]
        info.mode, info.size, info.mtime = entry.mode, entry.size, entry.mtime_ns // SECOND
        info.linkname = target.decode() if kind == "symlink" else ""
        info.uname = info.gname = ""
        assert header(entry) == info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"), entry


@pytest.mark.parametrize("which", ["fewer", "more"])
def test_a_file_whose_contents_hold_fewer_or_more_bytes_than_its_size_fails(which: str) -> None:
    entries, files = tree([file(b"a", b"a" * 1000), file(b"b", b"b" * 1000), file(b"c", b"c")])
    files[b"b"] = files[b"b"][:999] if which == "fewer" else files[b"b"] + b"!"
    size, stream = tree_tar(entries, served(files, piece=100))

    got = bytearray()
    with pytest.raises(DecryptionFailed) as raised:
        for piece in stream:
            got += piece

    assert which in raised.value.message and raised.value.data == {"path": "b", "size": 1000}
    assert len(got) < size and b"!" not in got  # nothing past the file's size went out


def test_an_error_from_the_contents_mid_file_passes_through() -> None:
    entries, files = tree([file(b"a", b"a" * 5000)])
    failure = DecryptionFailed("chunk 2 was tampered with")

    def contents(entry: TreeEntry) -> Iterator[bytes]:
        yield files[entry.path][:100]
        raise failure

    _, stream = tree_tar(entries, contents)
    with pytest.raises(DecryptionFailed) as raised:
        list(stream)
    assert raised.value is failure


# End to end: the restore script ----------------------------------------------------------------


def make_source(root: Path) -> None:
    """A repo's untracked folder ``tree`` and a conversation folder under ``home``, with the
    cases a rebuild must carry: modes, times with nanoseconds, links, an empty file, a name
    that is not UTF-8, paths past 100 and 255 bytes."""
    top = root / "repo" / "tree"
    deep = os.fsencode(top) + b"/" + b"/".join([b"long-folder-name-" * 5] * 3)
    os.makedirs(deep)
    with open(deep + b"/" + b"f" * 120, "wb") as out:
        out.write(b"deep\n" * 1000)
    with open(os.fsencode(top) + b"/caf\xe9.txt", "wb") as out:
        out.write(b"latin-1 name\n")
    (top / "empty").write_bytes(b"")
    (top / "run.sh").write_bytes(b"#!/bin/sh\n")
    (top / "run.sh").chmod(0o755)
    (top / "secret").write_bytes(os.urandom(3000))
    (top / "secret").chmod(0o600)
    os.symlink("run.sh", top / "latest")
    os.symlink(b"caf\xe9.txt", os.fsencode(top) + b"/to-latin")
    conv = root / "home" / ".claude" / "projects" / "-workspace-app"
    conv.mkdir(parents=True)
    (conv / "conv.jsonl").write_bytes(b'{"role": "user"}\n' * 500)
    (conv / "conv.jsonl").chmod(0o600)
    conv.chmod(0o700)
    rng = random.Random(7)
    for base in (root / "repo", root / "home"):  # deepest first: a child's time is its own
        for dirpath, dirnames, filenames in os.walk(os.fsencode(base), topdown=False):
            for name in [*filenames, *dirnames, b"."]:
                ns = rng.randint(1_500_000_000, 1_700_000_000) * SECOND + rng.randint(0, SECOND - 1)
                os.utime(os.path.join(dirpath, name), ns=(ns, ns), follow_symlinks=False)


def listing(root: Path, top: str) -> tuple[list[TreeEntry], dict[bytes, bytes]]:
    """``top`` and everything beneath it, relative to ``root``, as a manifest lists them."""
    entries, files = [], {}
    base = os.fsencode(root)
    for dirpath, dirnames, filenames in os.walk(os.fsencode(root / top)):
        dirnames.sort()
        for path in [dirpath] + [os.path.join(dirpath, n) for n in sorted(dirnames + filenames)]:
            st = os.lstat(path)
            rel = os.path.relpath(path, base)
            if stat.S_ISDIR(st.st_mode):
                if path == dirpath:
                    entries.append(folder(rel, stat.S_IMODE(st.st_mode), st.st_mtime_ns))
            elif stat.S_ISLNK(st.st_mode):
                entries.append(link(rel, os.readlink(path), st.st_mtime_ns))
            else:
                data = Path(os.fsdecode(path)).read_bytes()
                entries.append(file(rel, data, stat.S_IMODE(st.st_mode), st.st_mtime_ns)[0])
                files[rel] = data
    return entries, files


def gnu_tar(root: Path, entries: list[TreeEntry]) -> bytes:
    """GNU tar's archive of the entries, made as the checkpoint makes it."""
    members = b"".join(e.path + b"\0" for e in entries)
    command = ["tar", "-c", "-f", "-", "--null", "--no-recursion", "--hard-dereference", "-T", "-"]
    return subprocess.run(command, input=members, cwd=root, capture_output=True, check=True,
                          timeout=60).stdout  # fmt: skip


def test_the_restore_script_writes_a_rebuilt_tree_as_it_writes_gnu_tars_archive_of_it(
    restore_world: World,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    source = tmp_path / "source"
    make_source(source)
    untracked = listing(source / "repo", "tree")
    agent = listing(source / "home", ".claude/projects")
    assert len(untracked[0]) == 11 and len(agent[0]) == 3  # every case above is listed
    world = restore_world
    restored = {}
    for how in ("rebuilt", "gnu tar"):
        shutil.rmtree(world.repo / "tree", ignore_errors=True)
        shutil.rmtree(world.home / ".claude", ignore_errors=True)
        if how == "rebuilt":
            parts = {"untracked.tar": (rebuilt(untracked[0], served(untracked[1])), "none"),
                     "agent.tar": (rebuilt(agent[0], served(agent[1])), "none")}  # fmt: skip
        else:
            parts = {"untracked.tar": (gnu_tar(source / "repo", untracked[0]), "none"),
                     "agent.tar": (gnu_tar(source / "home", agent[0]), "none")}  # fmt: skip

        answer = restore(world, parts)

        answer.pop("seconds")
        assert answer == {"ok": True, "warnings": []}, how
        restored[how] = (snapshot(world.repo / "tree", times=True),
                         snapshot(world.home / ".claude/projects", times=True))  # fmt: skip
    assert restored["rebuilt"] == restored["gnu tar"]
    assert os.path.exists(os.fsencode(world.repo / "tree") + b"/caf\xe9.txt")
    untimed = (snapshot(source / "repo" / "tree", times=False),
               snapshot(source / "home" / ".claude/projects", times=False))  # fmt: skip
    assert tuple({k: v[:3] for k, v in s.items()} for s in restored["rebuilt"]) == untimed
