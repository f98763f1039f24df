"""What a direct take says it wrote is checked before anything is recorded
(:func:`hangar.checkpoints.direct.check_answer`)."""

from __future__ import annotations

import pytest

from hangar.blobs.signing import BlobStat, SignedRequest
from hangar.checkpoints.direct import Answer, grant_take, owner_of
from hangar.checkpoints.direct import check_answer
from hangar.errors import BlobNotFound, CheckpointError
from hangar.models import Checkpoint


class Bucket:
    """The signing port over a dict of objects: key -> (size, md5)."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[int, str]] = {}

    def sign_put(self, key: str, seconds: int) -> SignedRequest:
        return SignedRequest("PUT", f"https://storage.example/{key}?sig",
                             {"x-goog-if-generation-match": "0"})  # fmt: skip

    def sign_get(self, key: str, seconds: int) -> SignedRequest:
        return SignedRequest("GET", f"https://storage.example/{key}?sig", {})

    def stat(self, key: str) -> BlobStat:
        if key not in self.objects:
            raise BlobNotFound(key)
        size, md5 = self.objects[key]
        return BlobStat(size, md5)


SOURCE = Checkpoint(id="ckp_src", session_id="ses_a", reason="turn", format=2, wrapped_key="",
                    packs=["sessions/ses_a/packs/20260101T000000Z-00", "sessions/ses_p/packs/"
                           "20260101T000000Z-01"])  # fmt: skip


def setup() -> tuple[Bucket, object, dict[str, object]]:
    bucket = Bucket()
    grant = grant_take(bucket, "ses_a", "ckp_new", b"k" * 32, None, 60)
    pack, root = grant.puts[0].key, grant.puts[1].key
    bucket.objects = {pack: (1000, "aa" * 16), root: (300, "bb" * 16)}
    said = {"direct": True, "root": {"key": root, "size": 250, "stored_size": 300,
                                     "sha256": "cc" * 32},
            "packs": [pack, root, SOURCE.packs[1]],
            "objects": {pack: {"size": 1000, "md5": "aa" * 16},
                        root: {"size": 300, "md5": "bb" * 16}},
            "written": 1000}  # fmt: skip
    return bucket, grant, said


def test_an_answer_whose_objects_are_all_there_as_said_gives_the_record_its_packs_and_owners() -> None:
    bucket, grant, said = setup()
    fields = check_answer(bucket, grant, Answer.model_validate(said), SOURCE)  # type: ignore[arg-type]
    assert fields["uses"] == ["ses_a", "ses_p"] and fields["written"] == 1000
    assert fields["source"] == "ckp_src" and len(fields["packs"]) == 3  # type: ignore[arg-type]


@pytest.mark.parametrize("change, message", [
    (lambda b, s: s["objects"].update({"sessions/ses_a/packs/x": {"size": 1, "md5": "00"}}),
     "not granted"),
    (lambda b, s: b.objects.pop(s["root"]["key"]), "is not there"),
    (lambda b, s: b.objects.update({s["packs"][0]: (1000, "dd" * 16)}), "is not what"),
    (lambda b, s: b.objects.update({s["packs"][0]: (999, "aa" * 16)}), "is not what"),
    (lambda b, s: s["objects"].pop(s["root"]["key"]), "manifest is not among"),
    (lambda b, s: s["packs"].append("sessions/ses_z/packs/20260101T000000Z-09"), "may not"),
    (lambda b, s: s.update(written=5), "do not add up"),
    (lambda b, s: s["root"].update(stored_size=299), "not the size"),
])  # fmt: skip
def test_an_answer_that_does_not_hold_is_refused(change: object, message: str) -> None:
    bucket, grant, said = setup()
    change(bucket, said)  # type: ignore[operator]
    with pytest.raises(CheckpointError, match=message):
        check_answer(bucket, grant, Answer.model_validate(said), SOURCE)  # type: ignore[arg-type]


def test_a_pack_key_names_its_owner_and_nothing_else_does() -> None:
    assert owner_of("sessions/ses_a/packs/20260101T000000Z-00") == "ses_a"
    assert owner_of("sessions/ses_a/ckp_1/manifest") is None
    assert owner_of("elsewhere/ses_a/packs/x") is None
