"""The blobs conformance suite: subclass it and provide a ``blobs`` fixture."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from hangar.blobs import Blobs
from hangar.errors import AlreadyExists, BlobNotFound, InvalidInput


class BlobsConformance:
    def test_put_then_get_returns_the_same_bytes(self, blobs: Blobs) -> None:
        assert blobs.put("a/b/c.bin", b"\x00\x01hello") == 7
        assert blobs.get("a/b/c.bin") == b"\x00\x01hello"

    def test_put_streams_chunks_and_open_streams_them_back(self, blobs: Blobs) -> None:
        chunks = [os.urandom(300_000) for _ in range(5)]
        assert blobs.put("big/part", iter(chunks)) == 1_500_000
        with blobs.open("big/part") as stream:
            received = b"".join(iter(lambda: stream.read(65536), b""))
        assert received == b"".join(chunks)

    def test_an_empty_object_round_trips(self, blobs: Blobs) -> None:
        blobs.put("empty", b"")
        assert blobs.exists("empty")
        assert blobs.get("empty") == b""

    def test_put_replaces_an_existing_object(self, blobs: Blobs) -> None:
        blobs.put("k", b"one")
        blobs.put("k", b"two")
        assert blobs.get("k") == b"two"

    def test_create_only_put_refuses_an_existing_key_and_keeps_the_old_bytes(
        self, blobs: Blobs
    ) -> None:
        blobs.put("k", b"first", if_absent=True)
        with pytest.raises(AlreadyExists):
            blobs.put("k", b"second", if_absent=True)
        assert blobs.get("k") == b"first"

    def test_concurrent_create_only_puts_let_exactly_one_win(self, blobs: Blobs) -> None:
        barrier = threading.Barrier(3)
        outcomes: list[str] = []

        def attempt(n: int) -> None:
            barrier.wait()
            try:
                blobs.put("race", f"writer {n}".encode(), if_absent=True)
                outcomes.append("won")
            except AlreadyExists:
                outcomes.append("lost")

        threads = [threading.Thread(target=attempt, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["lost", "lost", "won"]
        assert blobs.get("race").startswith(b"writer ")

    def test_a_failed_streamed_put_leaves_no_object(self, blobs: Blobs) -> None:
        def broken() -> Iterator[bytes]:
            yield b"partial data"
            raise RuntimeError("source failed")

        with pytest.raises(RuntimeError):
            blobs.put("half", broken())
        assert not blobs.exists("half")
        assert blobs.list() == []

    def test_get_and_open_of_a_missing_key_raise_blob_not_found(self, blobs: Blobs) -> None:
        with pytest.raises(BlobNotFound):
            blobs.get("missing")
        with pytest.raises(BlobNotFound):
            with blobs.open("missing"):
                pass
        assert not blobs.exists("missing")

    def test_delete_removes_and_is_idempotent(self, blobs: Blobs) -> None:
        blobs.put("x/y", b"1")
        blobs.delete("x/y")
        blobs.delete("x/y")
        assert not blobs.exists("x/y")

    def test_list_returns_sorted_keys_under_a_prefix(self, blobs: Blobs) -> None:
        for key in ("s/2/b", "s/1/a", "s/1/c", "t/1"):
            blobs.put(key, b".")
        assert blobs.list("s/1/") == ["s/1/a", "s/1/c"]
        assert blobs.list("s/") == ["s/1/a", "s/1/c", "s/2/b"]
        assert blobs.list() == ["s/1/a", "s/1/c", "s/2/b", "t/1"]

    @pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "..", "./a", "a/"])
    def test_unsafe_keys_are_refused_with_invalid_input(self, blobs: Blobs, key: str) -> None:
        with pytest.raises(InvalidInput):
            blobs.put(key, b"x")

    def test_read_range_reads_the_middle_of_an_object(self, blobs: Blobs) -> None:
        data = os.urandom(100_000)
        blobs.put("packs/p", data)
        assert blobs.read_range("packs/p", 40_000, 123) == data[40_000:40_123]
        assert blobs.read_range("packs/p", 0, 1) == data[:1]

    def test_read_range_past_the_end_returns_only_what_the_object_holds(
        self, blobs: Blobs
    ) -> None:
        blobs.put("packs/p", b"0123456789")
        assert blobs.read_range("packs/p", 7, 100) == b"789"
        assert blobs.read_range("packs/p", 0, 10) == b"0123456789"
        assert blobs.read_range("packs/p", 10, 5) == b""
        assert blobs.read_range("packs/p", 50, 2**40) == b""

    def test_read_range_of_no_bytes_is_empty_and_of_an_empty_object_too(
        self, blobs: Blobs
    ) -> None:
        blobs.put("packs/p", b"0123456789")
        blobs.put("packs/empty", b"")
        assert blobs.read_range("packs/p", 3, 0) == b""
        assert blobs.read_range("packs/empty", 0, 0) == b""
        assert blobs.read_range("packs/empty", 0, 8) == b""

    def test_read_range_of_a_missing_key_raises_blob_not_found(self, blobs: Blobs) -> None:
        with pytest.raises(BlobNotFound):
            blobs.read_range("packs/missing", 0, 10)
        with pytest.raises(BlobNotFound):
            blobs.read_range("packs/missing", 0, 0)

    @pytest.mark.parametrize(("start", "length"), [(-1, 5), (0, -1), (-3, -3)])
    def test_read_range_with_a_negative_start_or_length_raises_invalid_input(
        self, blobs: Blobs, start: int, length: int
    ) -> None:
        blobs.put("packs/p", b"0123456789")
        with pytest.raises(InvalidInput):
            blobs.read_range("packs/p", start, length)
