"""What uploads may hold, over real local blobs and keys: a token's uploads are capped (complete
or not, until used or expired), and no part takes an upload past its own ``max_bytes``."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import timedelta

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.errors import PayloadTooLarge, TooManyUploads
from hangar.exchange.uploads import Upload, Uploads
from hangar.keys.local import LocalKeys
from hangar.models import ContextKind, utcnow

KIB = 1 / 1024  # MiB


def uploads_with(settings: Settings, blobs: LocalBlobs, keys: LocalKeys, **changes: object
                 ) -> Uploads:  # fmt: skip
    return Uploads(settings.model_copy(update=changes), blobs, keys)


def metas(blobs: LocalBlobs) -> list[str]:
    return [k for k in blobs.list("uploads/") if k.endswith("/meta.json")]


def test_a_token_holds_at_most_its_cap_of_uploads_complete_or_not_and_others_are_not_counted(
    settings: Settings, blobs: LocalBlobs, keys: LocalKeys
) -> None:
    uploads = uploads_with(settings, blobs, keys, exchange_max_open_uploads=3,
                           exchange_upload_part_mb=KIB)  # fmt: skip
    held = [uploads.begin(ContextKind.PATCH, token_id="tok-a") for _ in range(3)]
    uploads.put_part(held[0].id, 1, [b"x"])
    uploads.complete(held[0].id, hashlib.sha256(b"x").hexdigest())  # complete: still held
    with pytest.raises(TooManyUploads) as refused:
        uploads.begin(ContextKind.BUNDLE, token_id="tok-a")
    error = refused.value
    assert (error.code, error.status, error.data["limit"]) == ("too_many_uploads", 429, 3)
    assert error.retry_after is not None and 3500 < error.retry_after <= 3600
    assert len(metas(blobs)) == 3  # nothing made
    other = uploads.begin(ContextKind.PATCH, token_id="tok-b")  # another token's own count
    uploads.delete(held[1].id)  # used up by a request
    uploads.begin(ContextKind.PATCH, token_id="tok-a")
    with pytest.raises(TooManyUploads):
        uploads.begin(ContextKind.PATCH, token_id="tok-a")
    expire(blobs, held[2])  # an expired one frees its place as the next start sweeps it
    uploads.begin(ContextKind.PATCH, token_id="tok-a")
    assert {u.token_id for u in map(uploads.get, [held[0].id, other.id])} == {"tok-a", "tok-b"}
    assert len(metas(blobs)) == 4


def test_two_starts_racing_for_a_tokens_last_place_never_both_stay(
    settings: Settings, keys: LocalKeys
) -> None:
    class Racing(LocalBlobs):
        """Blobs where a rival start of the same token saves its upload just before ours."""

        rival: Upload | None = None

        def put(self, key: str, data: bytes | Iterable[bytes], *, if_absent: bool = False) -> int:
            rival, self.rival = self.rival, None
            if rival is not None and key.endswith("/meta.json"):
                super().put(f"uploads/{rival.id}/meta.json", rival.model_dump_json().encode())
            return super().put(key, data, if_absent=if_absent)

    blobs = Racing.from_url(settings.session_store)
    uploads = uploads_with(settings, blobs, keys, exchange_max_open_uploads=2)
    first = uploads.begin(ContextKind.PATCH, token_id="tok-a")
    blobs.rival = first.model_copy(update={"id": "upl-" + "f" * 32})
    with pytest.raises(TooManyUploads):
        uploads.begin(ContextKind.PATCH, token_id="tok-a")
    assert sorted(metas(blobs)) == sorted(f"uploads/{u}/meta.json" for u in
                                          (first.id, "upl-" + "f" * 32))  # fmt: skip


def test_a_part_that_would_take_an_upload_past_its_max_bytes_is_refused_and_changes_nothing(
    settings: Settings, blobs: LocalBlobs, keys: LocalKeys
) -> None:
    # a patch of at most 2.5 KiB in parts of 1 KiB: part 3 may carry 512 bytes
    uploads = uploads_with(settings, blobs, keys, exchange_upload_part_mb=KIB,
                           exchange_max_patch_mb=2.5 * KIB)  # fmt: skip
    upload = uploads.begin(ContextKind.PATCH, token_id="tok-a")
    assert (upload.max_parts, upload.part_limit(1), upload.part_limit(3)) == (3, 1024, 512)
    with pytest.raises(PayloadTooLarge, match="past its max_bytes of 2560") as refused:
        uploads.put_part(upload.id, 3, [b"c" * 300, b"c" * 213])
    assert (refused.value.data["limit"], refused.value.status) == (512, 413)
    assert blobs.list(f"uploads/{upload.id}/parts/") == []
    uploads.put_part(upload.id, 3, [b"c" * 512])
    with pytest.raises(PayloadTooLarge):
        uploads.put_part(upload.id, 3, [b"z" * 1024])  # sent again, too large: the old one stays
    uploads.put_part(upload.id, 1, [b"a" * 1024])
    uploads.put_part(upload.id, 2, [b"b" * 1024])
    whole = b"a" * 1024 + b"b" * 1024 + b"c" * 512
    assert uploads.complete(upload.id, hashlib.sha256(whole).hexdigest()).size == 2560

    # one part larger than the whole item may be (the 64 MB past a smaller limit)
    one_part = uploads_with(settings, blobs, keys, exchange_upload_part_mb=4 * KIB,
                            exchange_max_patch_mb=3 * KIB)  # fmt: skip
    single = one_part.begin(ContextKind.PATCH, token_id="t")
    with pytest.raises(PayloadTooLarge, match="past its max_bytes of 3072"):
        uploads.put_part(single.id, 1, [b"x" * 3073])
    assert uploads.put_part(single.id, 1, [b"x" * 3072]) == 3072


def expire(blobs: LocalBlobs, upload: Upload) -> None:
    gone = upload.model_copy(update={"expires_at": utcnow() - timedelta(seconds=1)})
    blobs.put(f"uploads/{upload.id}/meta.json", gone.model_dump_json().encode())
