"""Context items and uploads over real local blobs and keys: what is sealed where, what a
tampered blob does, how two requests for the same turn keep apart, and an upload's bounds."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.errors import BlobNotFound, DecryptionFailed, InvalidContext, InvalidInput, PayloadTooLarge
from hangar.errors import UploadNotFound
from hangar.exchange.context import ContextItem, ContextStore
from hangar.exchange.uploads import Upload, Uploads
from hangar.keys.local import LocalKeys
from hangar.models import ContextKind, utcnow

PATCH = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.fixture
def small(settings: Settings) -> Settings:
    return settings.model_copy(update={"exchange_upload_part_mb": 1 / 1024,  # 1 KiB parts
                                       "exchange_max_patch_mb": 4 / 1024})  # fmt: skip


@pytest.fixture
def uploads(small: Settings, blobs: LocalBlobs, keys: LocalKeys) -> Uploads:
    return Uploads(small, blobs, keys)


@pytest.fixture
def store(small: Settings, blobs: LocalBlobs, keys: LocalKeys, uploads: Uploads) -> ContextStore:
    return ContextStore(small, blobs, keys, uploads)


def item(**fields: object) -> ContextItem:
    return ContextItem.model_validate(fields)


def test_items_are_sealed_apart_and_read_back_and_a_url_is_not_stored(
    store: ContextStore, blobs: LocalBlobs
) -> None:
    accepted = store.accept("ses-1", 3, [item(kind="text", content="hello"),
                                          item(kind="url", url="https://example.com/x")])  # fmt: skip
    text, url = accepted.refs
    assert (text.name, text.size, url.url, url.blob) == ("text-1.txt", 5, "https://example.com/x",
                                                         None)  # fmt: skip
    assert text.blob and text.blob.startswith("sessions/ses-1/context/3-")
    assert b"hello" not in blobs.get(text.blob)  # sealed
    assert store.read_all(text) == b"hello"


def test_a_tampered_or_moved_item_does_not_open(store: ContextStore, blobs: LocalBlobs) -> None:
    ref = store.accept("ses-1", 1, [item(kind="log", name="ci.log", content="x" * 100)]).refs[0]
    assert ref.blob is not None
    sealed = bytearray(blobs.get(ref.blob))
    sealed[-5] ^= 1
    blobs.put(ref.blob, bytes(sealed))
    with pytest.raises(DecryptionFailed):
        store.read_all(ref)
    other = store.accept("ses-2", 1, [item(kind="log", name="ci.log", content="y" * 100)]).refs[0]
    assert other.blob is not None
    blobs.put(ref.blob, blobs.get(other.blob))  # another session's item in its place
    with pytest.raises(DecryptionFailed):
        store.read_all(ref)


def test_two_requests_for_the_same_turn_store_apart_and_the_losers_release_keeps_the_winners(
    store: ContextStore,
) -> None:
    winner = store.accept("ses-1", 2, [item(kind="text", content="winner")])
    loser = store.accept("ses-1", 2, [item(kind="text", content="loser")])
    store.release(loser)
    assert store.read_all(winner.refs[0]) == b"winner"
    with pytest.raises(BlobNotFound):
        store.read_all(loser.refs[0])


def test_duplicate_names_and_a_second_patch_are_refused_before_anything_is_stored(
    store: ContextStore, blobs: LocalBlobs
) -> None:
    with pytest.raises(InvalidContext, match="two items are named"):
        store.accept("ses-1", 1, [item(kind="file", name="A.txt", content="1"),
                                  item(kind="file", name="a.txt", content="2")])  # fmt: skip
    with pytest.raises(InvalidContext, match="at most one patch"):
        store.accept("ses-1", 1, [item(kind="patch", content=PATCH)] * 2)
    assert blobs.list("sessions/") == []


def test_an_upload_in_parts_becomes_an_item_and_is_used_up(
    uploads: Uploads, store: ContextStore, blobs: LocalBlobs
) -> None:
    data = (PATCH * 40).encode()[:3000]
    upload = uploads.begin(ContextKind.PATCH, token_id="tok-1")
    assert (upload.part_bytes, upload.max_parts) == (1024, 4)
    for n, offset in enumerate(range(0, len(data), 1024), start=1):
        assert uploads.put_part(upload.id, n, [data[offset:offset + 1024]]) == len(data[offset:offset + 1024])
    with pytest.raises(InvalidContext, match="is not complete"):
        store.accept("ses-1", 1, [item(kind="patch", upload_id=upload.id)])
    uploads.complete(upload.id, hashlib.sha256(data).hexdigest())
    with pytest.raises(InvalidContext, match="was made for a patch"):
        store.accept("ses-1", 1, [item(kind="text", upload_id=upload.id)])
    accepted = store.accept("ses-1", 1, [item(kind="patch", upload_id=upload.id)])
    assert store.read_all(accepted.refs[0]) == data
    store.settle(accepted)
    assert blobs.list("uploads/") == []
    with pytest.raises(UploadNotFound):
        uploads.get(upload.id)


def test_an_uploads_parts_are_bounded_and_checked_whole(uploads: Uploads) -> None:
    upload = uploads.begin(ContextKind.PATCH, token_id="tok-1")
    with pytest.raises(PayloadTooLarge, match="over the part size"):
        uploads.put_part(upload.id, 1, [b"x" * 1025])
    with pytest.raises(InvalidInput, match="part must be from 1 to 4"):
        uploads.put_part(upload.id, 5, [b"x"])
    uploads.put_part(upload.id, 1, [b"a"])
    uploads.put_part(upload.id, 3, [b"c"])
    with pytest.raises(InvalidContext, match="parts missing: 2"):
        uploads.complete(upload.id, hashlib.sha256(b"abc").hexdigest())
    uploads.put_part(upload.id, 2, [b"b"])
    with pytest.raises(InvalidContext, match="sha256"):
        uploads.complete(upload.id, "0" * 64)
    assert uploads.complete(upload.id, hashlib.sha256(b"abc").hexdigest()).size == 3
    with pytest.raises(InvalidInput, match="is complete"):
        uploads.put_part(upload.id, 1, [b"z"])


def test_an_expired_upload_is_gone_and_swept(uploads: Uploads, blobs: LocalBlobs) -> None:
    old = uploads.begin(ContextKind.BUNDLE, token_id="tok-1")
    uploads.put_part(old.id, 1, [b"x"])
    expired = Upload.model_validate_json(blobs.get(f"uploads/{old.id}/meta.json")).model_copy(
        update={"expires_at": utcnow() - timedelta(seconds=1)})  # fmt: skip
    blobs.put(f"uploads/{old.id}/meta.json", expired.model_dump_json().encode())
    fresh = uploads.begin(ContextKind.BUNDLE, token_id="tok-1")  # sweeps the expired one
    assert all(k.startswith(f"uploads/{fresh.id}/") for k in blobs.list("uploads/"))
    with pytest.raises(UploadNotFound):
        uploads.get(old.id)
    with pytest.raises(UploadNotFound, match="not an upload id"):
        uploads.get("../../sessions")
