"""hangar/agent/chunking.py, the sandbox's side of content-addressed checkpoints: which chunks
an edit changes, when the stat cache may be believed, what is never followed or read, and that
a patch cut into per-file sections joins back to the same bytes."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

import pytest

from hangar.agent import chunking
from hangar.agent.chunking import BLOCK, RACY_NS, Chunk, StatCache, Unreadable, chunk_file, listing
from hangar.agent.chunking import patch_chunks, split_patch

# Shipped into sandboxes beside chunking.py, themselves standard library only.
SHIPPED = {"hangar.agent.paths"}


def text_lines(n_bytes: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < n_bytes:
        out += b'{"turn": %d, "text": "%s"}\n' % (len(out), bytes(rng.choice(b"abcdefgh ") for _ in range(60)))
    return bytes(out[:n_bytes])


def private(tmp_path: Path) -> Path:
    """hangar's own scratch folder (0700), made on first use."""
    folder = tmp_path / "hangar-tmp"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def changed(before: list[Chunk], after: list[Chunk]) -> list[Chunk]:
    """The chunks of ``after`` that ``before`` does not hold (at that place)."""
    return [c for c in after if c not in before]


def move_ctime(path: Path) -> None:
    """Touch ``path``'s inode until the clock's tick moves its ctime (bounded)."""
    start = os.lstat(path).st_ctime_ns
    for _ in range(2_000_000):
        os.chmod(path, os.lstat(path).st_mode & 0o7777)
        if os.lstat(path).st_ctime_ns != start:
            return
    raise AssertionError("the ctime never moved")


def test_chunking_imports_only_the_standard_library_and_modules_shipped_beside_it() -> None:
    tree = ast.parse(Path(chunking.__file__).read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module
            names.add(node.module)
    outside = {n for n in names if n.split(".")[0] not in sys.stdlib_module_names and n not in SHIPPED}
    assert names and not outside


def test_a_file_is_cut_into_blocks_named_by_their_sha256_that_join_to_its_bytes(tmp_path: Path) -> None:
    data = os.urandom(3 * BLOCK + 17)
    (tmp_path / "f").write_bytes(data)
    seen: dict[str, bytes] = {}
    chunks = chunk_file(str(tmp_path / "f"), sink=lambda cid, b: seen.setdefault(cid, b))
    assert [(c.offset, c.size) for c in chunks] == [(0, BLOCK), (BLOCK, BLOCK), (2 * BLOCK, BLOCK), (3 * BLOCK, 17)]
    assert b"".join(seen[c.cid] for c in chunks) == data
    assert all(hashlib.sha256(seen[c.cid]).hexdigest() == c.cid for c in chunks)
    (tmp_path / "small").write_bytes(b"x" * BLOCK)
    (tmp_path / "empty").write_bytes(b"")
    assert len(chunk_file(str(tmp_path / "small"))) == 1 and chunk_file(str(tmp_path / "empty")) == []


def test_a_one_line_edit_in_a_1_mb_file_changes_exactly_one_chunk(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    data = text_lines(1 << 20)
    path.write_bytes(data)
    before = chunk_file(str(path))
    line = data.index(b"\n", 600_000) + 1
    edited = data[:line] + data[line : line + 10].upper() + data[line + 10 :]
    assert edited != data
    path.write_bytes(edited)
    after = chunk_file(str(path))
    assert len(after) == len(before) == 16 and len(changed(before, after)) == 1


def test_an_insertion_in_a_large_file_changes_only_the_blocks_from_it_on(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    data = text_lines(1 << 20)
    path.write_bytes(data)
    before = chunk_file(str(path))
    path.write_bytes(data[: 15 * BLOCK + 5] + b"one more line\n" + data[15 * BLOCK + 5 :])
    after = chunk_file(str(path))
    assert after[:15] == before[:15] and len(changed(before, after)) == 2


def test_an_append_to_a_jsonl_file_changes_only_its_last_block_and_adds_one_past_it(tmp_path: Path) -> None:
    path = tmp_path / "conversation.jsonl"
    data = text_lines(5 * BLOCK + 1000)
    path.write_bytes(data)
    before = chunk_file(str(path))
    with open(path, "ab") as f:
        f.write(text_lines(BLOCK, seed=2))
    after = chunk_file(str(path))
    assert after[:5] == before[:5] and after[5] != before[5]
    assert len(after) == 7 and changed(before, after) == after[5:]


def test_a_descriptor_is_chunked_without_being_closed(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"hello")
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        assert chunk_file(fd) == [Chunk(hashlib.sha256(b"hello").hexdigest(), 0, 5)]
        assert os.fstat(fd).st_size == 5
    finally:
        os.close(fd)


def test_a_symlink_or_fifo_swapped_in_for_a_file_is_neither_followed_nor_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"not for the checkpoint")
    link, fifo = tmp_path / "link", tmp_path / "fifo"
    link.symlink_to(secret)
    os.mkfifo(fifo)  # a FIFO no one writes: reading it would block for ever
    for path in (link, fifo):
        with pytest.raises(Unreadable):
            chunk_file(str(path))
    # Swapped after the lstat the caller judged it by: the open sees another inode, or a link.
    file_stat = os.lstat(secret)
    with pytest.raises(Unreadable):
        chunking.open_regular(str(fifo), file_stat)
    with pytest.raises(Unreadable):
        chunking.open_regular(str(link), file_stat)
    other = tmp_path / "other"
    other.write_bytes(b"a file put in its place")
    with pytest.raises(Unreadable):
        chunking.open_regular(str(other), file_stat)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(Unreadable):
            chunk_file(fd)
    finally:
        os.close(fd)


def test_a_listing_names_folders_links_and_files_and_leaves_out_what_was_swapped(tmp_path: Path) -> None:
    root = tmp_path / "home"
    (root / "d").mkdir(parents=True)
    (root / "d" / "a.jsonl").write_bytes(b"line\n")
    (root / "d" / "ln").symlink_to("a.jsonl")
    os.mkfifo(root / "d" / "pipe")
    name = os.fsdecode(b"d/n\xff")
    (root / name).write_bytes(b"")
    warnings: list[str] = []
    got = listing(str(root), ["d", "d/a.jsonl", "d/ln", "d/pipe", name, "d/gone"], StatCache(), warnings=warnings)
    assert [(e.path, e.kind, e.size, e.target) for e in got] == [
        (b"d", "dir", 0, None), (b"d/a.jsonl", "file", 5, None), (b"d/ln", "symlink", 7, b"a.jsonl"),
        (b"d/n\xff", "file", 0, None)]  # fmt: skip
    assert got[1].chunks == [Chunk(hashlib.sha256(b"line\n").hexdigest(), 0, 5)] and got[3].chunks == []
    assert got[1].mode == 0o666 & ~current_umask() and warnings == ["d/pipe left out: it is not a file, folder or link"]


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def cached_listing(tmp_path: Path, root: Path, members: list[str], now_ns: int) -> tuple[list, list[str]]:
    """A listing through a cache loaded from ``tmp_path``'s private folder and saved at
    ``now_ns``; returns it and the chunks that were read."""
    read: list[str] = []
    cache = StatCache(str(private(tmp_path)))
    got = listing(str(root), members, cache, sink=lambda cid, _: read.append(cid))
    cache.save(now_ns=now_ns)
    return got, read


def test_an_unchanged_file_is_not_read_again_once_its_entry_is_not_racy(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "f").write_bytes(b"abc")
    later = os.lstat(root / "f").st_ctime_ns + 2 * RACY_NS
    first, read = cached_listing(tmp_path, root, ["f"], later)
    assert read == [first[0].chunks[0].cid]
    again, read = cached_listing(tmp_path, root, ["f"], later)
    assert again == first and read == []


def test_a_racy_entry_is_hashed_again(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "f").write_bytes(b"abc")
    ctime = os.lstat(root / "f").st_ctime_ns
    cached_listing(tmp_path, root, ["f"], ctime + RACY_NS // 2)  # saved in the same second
    again, read = cached_listing(tmp_path, root, ["f"], ctime + 2 * RACY_NS)
    assert read == [again[0].chunks[0].cid]
    _, read = cached_listing(tmp_path, root, ["f"], ctime + 3 * RACY_NS)
    assert read == []


def test_a_file_changed_with_its_size_and_mtime_kept_is_hashed_again(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    path = root / "f"
    path.write_bytes(b"old content")
    st = os.lstat(path)
    far = st.st_ctime_ns + 100 * RACY_NS
    first, _ = cached_listing(tmp_path, root, ["f"], far)
    # In place: the inode stays, the ctime moves (no unprivileged process can set it back).
    with open(path, "r+b") as f:
        f.write(b"new")
    move_ctime(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.lstat(path)
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    second, read = cached_listing(tmp_path, root, ["f"], far)
    assert read and second[0].chunks != first[0].chunks
    # Replaced by another file of the same size and mtime: the inode moves.
    (root / "g").write_bytes(b"old content")
    os.utime(root / "g", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(root / "g", path)
    third, read = cached_listing(tmp_path, root, ["f"], far)
    assert read and third[0].chunks == first[0].chunks


def test_a_cache_outside_a_private_folder_is_neither_read_nor_written(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    (tmp_path / "f").write_bytes(b"abc")
    cache = StatCache(str(shared))
    listing(str(tmp_path), ["f"], cache)
    cache.save(now_ns=os.lstat(tmp_path / "f").st_ctime_ns + 2 * RACY_NS)
    assert cache.path is None and not (shared / chunking.CACHE_NAME).exists()


def corrupted(text: str) -> list[str]:
    """Ways a cache file may have been spoiled or forged (each re-sealed with its digest, so
    only the content check can refuse it), and two that break the digest itself."""
    body, _ = text.rsplit("\n", 1)
    doc = json.loads(body)
    [(path, entry)] = doc["entries"].items()
    variants = [
        {**doc, "format": 99},
        {**doc, "uid": os.geteuid() + 1},
        {**doc, "written_ns": -1},
        {**doc, "entries": {path: entry[:5]}},
        {**doc, "entries": {"relative": entry}},
        {**doc, "entries": {path: [entry[0] + 1, *entry[1:]]}},  # chunks no longer cover the size
        {**doc, "entries": {path: [*entry[:5], [["zz" * 32, 0, entry[0]]]]}},
        {**doc, "entries": {path: [*entry[:5], [[entry[5][0][0], 1, entry[0]]]]}},
        {**doc, "entries": {path: [*entry[:4], "33188", entry[5]]}},
    ]
    out = []
    for variant in variants:
        body_v = json.dumps(variant, separators=(",", ":"))
        out.append(body_v + "\n" + hashlib.sha256(body_v.encode()).hexdigest())
    return [*out, body + "\n" + "0" * 64, text[: len(text) // 2]]


def test_a_corrupt_or_foreign_cache_is_ignored_whole(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "f").write_bytes(b"abc")
    later = os.lstat(root / "f").st_ctime_ns + 2 * RACY_NS
    cached_listing(tmp_path, root, ["f"], later)
    cache_file = private(tmp_path) / chunking.CACHE_NAME
    good = cache_file.read_text()
    assert StatCache(str(private(tmp_path))).entries  # the untouched one is believed
    for text in corrupted(good):
        cache_file.write_text(text)
        assert StatCache(str(private(tmp_path))).entries == {}, text[:200]
    cache_file.unlink()
    cache_file.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text(good)
    assert StatCache(str(private(tmp_path))).entries == {}


def test_a_cache_keeps_only_the_files_this_run_looked_at(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a").write_bytes(b"a")
    (root / "b").write_bytes(b"b")
    later = os.lstat(root / "b").st_ctime_ns + 2 * RACY_NS
    cached_listing(tmp_path, root, ["a", "b"], later)
    (root / "b").unlink()
    cached_listing(tmp_path, root, ["a"], later)
    assert list(StatCache(str(private(tmp_path))).entries) == [str(root / "a")]


PATCH = (b"diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
         b"diff --git a/y b/y\r\nnew file mode 100644\r\nGIT binary patch\r\nliteral 3\r\nKcmZ?\x00\xff\r\n\r\n"
         b"diff --git a/z b/z\ndeleted file mode 100644\n")  # fmt: skip


def test_a_patch_is_cut_into_one_section_per_file_that_join_to_the_same_bytes() -> None:
    pieces = split_patch(PATCH)
    assert len(pieces) == 3 and all(p.startswith(b"diff --git ") for p in pieces)
    assert b"".join(pieces) == PATCH
    assert split_patch(b"") == [] and split_patch(b"no diff here\n") == [b"no diff here\n"]
    assert split_patch(b"\ndiff --git a") == [b"\n", b"diff --git a"]
    chunks = patch_chunks(PATCH)
    assert [c.size for c in chunks] == [len(p) for p in pieces] and chunks[2].offset == len(pieces[0]) + len(pieces[1])


def test_editing_one_file_of_a_patch_changes_only_its_section() -> None:
    edited = PATCH.replace(b"+b\n", b"+c\n")
    assert len(changed(patch_chunks(PATCH), patch_chunks(edited))) == 1


def test_split_patch_round_trips_any_bytes() -> None:
    rng = random.Random(26)
    alphabet = [b"\n", b"\r\n", b"diff --git ", b"\ndiff --git ", b"diff", b" ", b"a", b"\x00", b"\xff", b"git"]
    for _ in range(3000):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        if rng.random() < 0.2:
            data += os.urandom(rng.randrange(0, 64))
        pieces = split_patch(data)
        assert b"".join(pieces) == data and all(pieces)
        assert all(p.startswith(b"diff --git ") for p in pieces[1:])
        assert all(chunking.PATCH_CUT not in p[:-1] for p in pieces), data


def test_a_files_patch_size_is_estimated_as_it_is_read_and_kept_in_the_cache(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "text.txt").write_bytes(b"a line of text\n" * 20000)
    (root / "noise.bin").write_bytes(os.urandom(300_000))
    (root / "zeros.bin").write_bytes(bytes(300_000))
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    first = {e.path: e.est for e in listing(str(root), ["text.txt", "noise.bin", "zeros.bin"],
                                             StatCache(str(private)))}  # fmt: skip
    assert first[b"text.txt"] == 300_000  # a patch carries text whole
    assert 290_000 < first[b"noise.bin"] <= 310_000  # noise does not deflate
    assert first[b"zeros.bin"] < 5_000  # zeros do
    cache = StatCache(str(private))
    later = time.time_ns() + 10 * RACY_NS
    listing(str(root), ["text.txt", "noise.bin", "zeros.bin"], cache)
    cache.save(now_ns=later)
    read: list[str] = []
    again = listing(str(root), ["text.txt", "noise.bin", "zeros.bin"], StatCache(str(private)),
                    sink=lambda cid, _: read.append(cid))  # fmt: skip
    assert read == [] and {e.path: e.est for e in again} == first
