"""hangar.agent.sealed, manifests and direct: direct format-2 checkpoints from the sandbox's
side, byte-compatible with the control plane's code both ways, over a signed-URL stand-in
(sealed_rig)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from hangar.agent import direct, manifests, sealed
from hangar.blobs.local import LocalBlobs
from hangar.checkpoints.chunked import ChunkedStore, accept, open_manifest, open_source
from hangar.checkpoints.chunks import chunk_aad, chunk_name, open_chunk, seal_chunk
from hangar.checkpoints.contents import Contents
from hangar.checkpoints.parts import CheckpointParts
from hangar.errors import DecryptionFailed
from hangar.keys.envelope import CHUNK, part_aad, seal_bytes, unseal_bytes
from hangar.keys.local import LocalKeys
from hangar.models import Checkpoint, CheckpointPart, CheckpointReason
from tests.unit.agent.sealed_rig import Store, signed_store, take

SESSION = "ses_sealed1"
OTHER = "ses_sealed2"


@pytest.fixture
def store(blobs: LocalBlobs) -> Iterator[Store]:
    with signed_store(blobs) as running:
        yield running


@pytest.fixture
def parts(blobs: LocalBlobs, keys: LocalKeys) -> CheckpointParts:
    return CheckpointParts(blobs, keys)


def make_tree(root: Path) -> Path:
    """A folder with what a tree part can hold: folders, files of one and several chunks, an
    empty file, an executable, a link, a name that is not UTF-8 and one past 100 bytes."""
    tree = root / "tree"
    (tree / "src" / "deep").mkdir(parents=True)
    (tree / "src" / "big.bin").write_bytes(secrets.token_bytes(200_000))
    (tree / "src" / "note.txt").write_text("a note\n")
    (tree / "empty").write_bytes(b"")
    (tree / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (tree / "run.sh").chmod(0o755)
    os.symlink("src/note.txt", tree / "link")
    (tree.joinpath(os.fsdecode(b"caf\xe9"))).write_bytes(b"latin-1 name")
    (tree / "src" / "deep" / ("n" * 120)).write_text("long name")
    return tree


def new_checkpoint(parts: CheckpointParts, session_id: str) -> tuple[Checkpoint, bytes]:
    data_key, wrapped = parts.new_key()
    return Checkpoint(session_id=session_id, reason=CheckpointReason.TURN,
                      wrapped_key=wrapped), data_key  # fmt: skip


def control_plane_take(parts: CheckpointParts, session_id: str, sent: dict[str, Any],
                       chunks: Path, source: Checkpoint | None) -> Checkpoint:  # fmt: skip
    """What the control plane stores today of a take (accept, then ChunkedStore.store)."""
    checkpoint, data_key = new_checkpoint(parts, session_id)
    held = open_source(parts, source) if source is not None else None
    listed, new = accept(json.dumps(sent).encode(), held)
    with chunks.open("rb") as spool:
        return ChunkedStore(parts).store(checkpoint, data_key, listed, new, spool, held, [])


def sandbox_take(store: Store, parts: CheckpointParts, session_id: str, sent: dict[str, Any],
                 chunks: Path, source: Checkpoint | None,
                 ) -> tuple[Checkpoint, dict[str, Any]]:  # fmt: skip
    """A take stored by sealed.py, recorded as the control plane would record its answer."""
    checkpoint, data_key = new_checkpoint(parts, session_id)
    opened = None
    if source is not None:
        opened = manifests.open_source(store.read_grant(source, parts.data_key(source)))
    answer = direct.store(store.grant(session_id, checkpoint.id, data_key), sent, str(chunks),
                          opened)  # fmt: skip
    root = answer["root"]
    recorded = checkpoint.model_copy(update={
        "format": 2, "packs": answer["packs"],
        "parts": [CheckpointPart(name="manifest", size=root["size"],
                                 stored_size=root["stored_size"], sha256=root["sha256"],
                                 key=root["key"])]})  # fmt: skip
    return recorded, answer


def known_to(parts: CheckpointParts, checkpoint: Checkpoint) -> set[str]:
    return {bytes(d).hex() for d in _digests(open_source(parts, checkpoint).known())}


def _digests(data: bytes) -> list[bytes]:
    return [data[i : i + 32] for i in range(0, len(data), 32)]


def rebuilt(parts: CheckpointParts, checkpoint: Checkpoint) -> dict[str, bytes]:
    """The parts the control plane's restore sends of ``checkpoint``, by name."""
    with ExitStack() as stack:
        return {p.name: b"".join(p.chunks)
                for p in Contents(parts, checkpoint).restore_parts(stack)}  # fmt: skip


def fetched(store: Store, parts: CheckpointParts, checkpoint: Checkpoint,
            staging: Path) -> dict[str, bytes]:  # fmt: skip
    staging.mkdir(exist_ok=True)
    paths = direct.fetch(store.read_grant(checkpoint, parts.data_key(checkpoint)), str(staging))
    trees = {"untracked", "agent", "exchange"}
    assert all(Path(p).name == (n + ".tar" if n in trees else n) for n, p in paths.items())
    return {Path(path).name: Path(path).read_bytes() for path in paths.values()}


def first_take(tmp_path: Path) -> tuple[Path, dict[str, Any], Path]:
    tree = make_tree(tmp_path)
    chunks = tmp_path / "chunks-1"
    blobs = {"meta.json": b'{"head": "abc"}', "repo.bundle": secrets.token_bytes(150_000)}
    return tree, take(tree, blobs, chunks, set()), chunks


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 7, 2 * CHUNK])
def test_a_part_sealed_on_either_side_opens_on_the_other(size: int) -> None:
    data, key = secrets.token_bytes(size), secrets.token_bytes(32)
    aad = part_aad("ses", "ckp", "manifest")
    assert sealed.part_aad("ses", "ckp", "manifest") == aad
    assert unseal_bytes(key, aad, sealed.seal_bytes(key, aad, data)) == data
    assert sealed.unseal_bytes(key, aad, seal_bytes(key, aad, data)) == data
    assert len(sealed.seal_bytes(key, aad, data)) == len(seal_bytes(key, aad, data))


def test_a_part_cut_short_or_bound_elsewhere_does_not_open() -> None:
    key, aad = secrets.token_bytes(32), part_aad("ses", "ckp", "manifest")
    whole = seal_bytes(key, aad, secrets.token_bytes(CHUNK + 10))
    with pytest.raises(sealed.Corrupt):
        sealed.unseal_bytes(key, aad, whole[: 12 + CHUNK + 16])
    with pytest.raises(sealed.Corrupt):
        sealed.unseal_bytes(key, part_aad("ses", "ckp2", "manifest"), whole)


def test_a_chunk_sealed_on_either_side_opens_on_the_other_under_the_same_name() -> None:
    key, naming = secrets.token_bytes(32), secrets.token_bytes(32)
    data = secrets.token_bytes(1000)
    cid = hashlib.sha256(data).hexdigest()
    assert sealed.chunk_name(naming, cid) == chunk_name(naming, cid)
    aad = chunk_aad(SESSION, chunk_name(naming, cid))
    assert sealed.chunk_aad(SESSION, chunk_name(naming, cid)) == aad
    assert open_chunk(key, aad, sealed.seal_chunk(key, aad, data)) == data
    assert sealed.open_chunk(key, aad, seal_chunk(key, aad, data)) == data
    with pytest.raises(sealed.Corrupt):
        sealed.open_chunk(key, chunk_aad(OTHER, chunk_name(naming, cid)),
                          seal_chunk(key, aad, data))  # fmt: skip


def test_a_checkpoint_the_sandbox_stores_is_what_the_control_plane_would_have_stored(
    store: Store, parts: CheckpointParts, blobs: LocalBlobs, tmp_path: Path
) -> None:
    _, sent, chunks = first_take(tmp_path)
    checkpoint, answer = sandbox_take(store, parts, SESSION, sent, chunks, None)
    manifest = open_manifest(parts, checkpoint)
    listed, _ = accept(json.dumps(sent).encode(), None)
    assert manifest.parts == listed
    assert {r.owner for r in manifest.chunks.values()} == {SESSION}
    assert set(answer["objects"]) == set(store.puts_of("PUT")) == set(answer["packs"])
    for key, stat in answer["objects"].items():
        data = blobs.get(key)
        assert stat == {"size": len(data), "md5": hashlib.md5(data).hexdigest()}
    assert answer["written"] == sum(s["size"] for k, s in answer["objects"].items()
                                    if k != answer["root"]["key"])  # fmt: skip
    control = control_plane_take(parts, SESSION, sent, chunks, None)
    assert rebuilt(parts, checkpoint) == rebuilt(parts, control)
    assert fetched(store, parts, checkpoint, tmp_path / "staging") == rebuilt(parts, control)


def test_the_root_is_the_json_the_control_plane_writes(
    store: Store, parts: CheckpointParts, blobs: LocalBlobs, tmp_path: Path
) -> None:
    from hangar.checkpoints.manifest import ManifestRoot

    _, sent, chunks = first_take(tmp_path)
    checkpoint, answer = sandbox_take(store, parts, SESSION, sent, chunks, None)
    body = unseal_bytes(parts.data_key(checkpoint),
                        part_aad(SESSION, checkpoint.id, "manifest"),
                        blobs.get(answer["root"]["key"]))  # fmt: skip
    assert ManifestRoot.model_validate_json(body).model_dump_json().encode() == body


def test_a_take_over_a_control_plane_checkpoint_sends_only_what_changed_and_reuses_its_pieces(
    store: Store, parts: CheckpointParts, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path)
    (tree / "many").mkdir()
    for i in range(300):  # records enough for pieces that an edit elsewhere leaves alone
        (tree / "many" / f"file-{i}").write_text(f"file {i}\n")
    blobs = {"meta.json": b'{"head": "abc"}', "repo.bundle": secrets.token_bytes(150_000)}
    chunks = tmp_path / "chunks-1"
    first = control_plane_take(parts, SESSION, take(tree, blobs, chunks, set()), chunks, None)
    source = manifests.open_source(store.read_grant(first, parts.data_key(first)))
    assert source.known() == known_to(parts, first)
    with (tree / "src" / "note.txt").open("a") as out:
        out.write("one more line\n")
    blobs = {"meta.json": b'{"head": "abc"}', "repo.bundle": b"a new bundle"}
    second_sent = take(tree, blobs, tmp_path / "chunks-2", source.known())
    assert len(second_sent["new"]) == 2
    before = len(store.puts_of("PUT"))
    second, answer = sandbox_take(store, parts, SESSION, second_sent, tmp_path / "chunks-2",
                                  first)  # fmt: skip
    assert len(store.puts_of("PUT")) - before == 2  # one pack and the root
    assert answer["written"] <= 64 * 1024 < first.written // 4
    old, new = open_source(parts, first), open_source(parts, second)
    assert new.root.naming_key == old.root.naming_key
    reused = [p for p in new.root.pieces if p.cid in old.pieces]
    assert reused and all(p.pack == old.pieces[p.cid].pack for p in reused)
    assert rebuilt(parts, second)["untracked.tar"].count(b"one more line") == 1
    assert fetched(store, parts, second, tmp_path / "staging") == rebuilt(parts, second)


def test_a_fork_names_its_chunks_with_a_key_of_its_own_and_refers_to_its_parents(
    store: Store, parts: CheckpointParts, tmp_path: Path
) -> None:
    tree, sent, chunks = first_take(tmp_path)
    parent, _ = sandbox_take(store, parts, OTHER, sent, chunks, None)
    source = manifests.open_source(store.read_grant(parent, parts.data_key(parent)))
    (tree / "added.txt").write_text("the fork's own file\n")
    fork_sent = take(tree, {"meta.json": b"{}"}, tmp_path / "chunks-2", source.known())
    fork, _ = sandbox_take(store, parts, SESSION, fork_sent, tmp_path / "chunks-2", parent)
    manifest = open_manifest(parts, fork)
    assert manifest.naming_key != open_manifest(parts, parent).naming_key
    owners = {cid: ref.owner for cid, ref in manifest.chunks.items()}
    fresh = {cid for cid, _ in fork_sent["new"]}
    assert fresh and all(owners[c] == SESSION for c in fresh)
    assert {owners[c] for c in owners if c not in fresh} == {OTHER}
    control = control_plane_take(parts, SESSION, fork_sent, tmp_path / "chunks-2", parent)
    assert rebuilt(parts, fork) == rebuilt(parts, control)
    assert fetched(store, parts, fork, tmp_path / "staging") == rebuilt(parts, control)


def test_the_chunks_still_used_in_a_mostly_unused_pack_move_keeping_their_key_and_name(
    store: Store, parts: CheckpointParts, tmp_path: Path
) -> None:
    tree, sent, chunks = first_take(tmp_path)
    (tree / "huge.bin").write_bytes(secrets.token_bytes(1_500_000))
    sent = take(tree, {"meta.json": b"{}"}, tmp_path / "chunks-1b", set())
    first, _ = sandbox_take(store, parts, SESSION, sent, tmp_path / "chunks-1b", None)
    assert len([p for p in first.packs if p != first.parts[0].key]) == 1
    (tree / "huge.bin").unlink()
    shutil.rmtree(tree / "src")
    source = manifests.open_source(store.read_grant(first, parts.data_key(first)))
    second_sent = take(tree, {"meta.json": b"{}"}, tmp_path / "chunks-2", source.known())
    second, _ = sandbox_take(store, parts, SESSION, second_sent, tmp_path / "chunks-2", first)
    old, new = open_manifest(parts, first), open_manifest(parts, second)
    (sparse,) = {r.pack for r in old.chunks.values()}
    assert sparse not in second.packs
    for cid, ref in new.chunks.items():
        assert (ref.key, ref.name) == (old.chunks[cid].key, old.chunks[cid].name)
        assert ref.pack != sparse
    assert fetched(store, parts, second, tmp_path / "staging") == rebuilt(parts, second)


def test_a_tampered_chunk_fails_the_fetch_and_leaves_staging_as_it_was(
    store: Store, parts: CheckpointParts, blobs: LocalBlobs, tmp_path: Path
) -> None:
    _, sent, chunks = first_take(tmp_path)
    checkpoint = control_plane_take(parts, SESSION, sent, chunks, None)
    ref = open_manifest(parts, checkpoint).chunks[sent["parts"][1]["chunks"][0]]
    data = bytearray(blobs.get(ref.pack))
    data[ref.offset + 40] ^= 1
    path = blobs.root / ref.pack
    path.write_bytes(bytes(data))
    staging = tmp_path / "staging"
    with pytest.raises(sealed.Corrupt):
        fetched(store, parts, checkpoint, staging)
    assert list(staging.iterdir()) == []
    with pytest.raises(DecryptionFailed):
        rebuilt(parts, checkpoint)


def test_a_chunk_whose_size_is_not_its_manifests_fails_the_fetch(
    store: Store, parts: CheckpointParts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, sent, chunks = first_take(tmp_path)
    add = direct.Packs.add

    def lying(self: direct.Packs, cid: str, data: bytes) -> sealed.Ref:
        ref = add(self, cid, data)
        return ref._replace(size=ref.size + 1) if len(data) == 150_000 - 2 * 65536 else ref

    monkeypatch.setattr(direct.Packs, "add", lying)
    with pytest.raises(sealed.Corrupt, match="add up"):
        sandbox_take(store, parts, SESSION, sent, chunks, None)
    monkeypatch.setattr(direct, "_check_sizes", lambda parts, refs: None)
    checkpoint, _ = sandbox_take(store, parts, SESSION, sent, chunks, None)
    monkeypatch.undo()
    staging = tmp_path / "staging"
    with pytest.raises(sealed.Corrupt, match="size"):
        fetched(store, parts, checkpoint, staging)
    assert list(staging.iterdir()) == []


def test_a_fetch_replaces_no_file_in_staging_and_leaves_it_as_it_was(
    store: Store, parts: CheckpointParts, tmp_path: Path
) -> None:
    _, sent, chunks = first_take(tmp_path)
    checkpoint, _ = sandbox_take(store, parts, SESSION, sent, chunks, None)
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "untracked.tar").write_bytes(b"already here")
    with pytest.raises(sealed.SealedError, match="untracked.tar"):
        fetched(store, parts, checkpoint, staging)
    assert [p.name for p in staging.iterdir()] == ["untracked.tar"]
    assert (staging / "untracked.tar").read_bytes() == b"already here"


def test_a_missing_pack_fails_the_fetch_with_the_stores_error(
    store: Store, parts: CheckpointParts, blobs: LocalBlobs, tmp_path: Path
) -> None:
    _, sent, chunks = first_take(tmp_path)
    checkpoint, _ = sandbox_take(store, parts, SESSION, sent, chunks, None)
    (pack,) = {r.pack for r in open_manifest(parts, checkpoint).chunks.values()}
    blobs.delete(pack)
    staging = tmp_path / "staging"
    with pytest.raises(sealed.TransferFailed) as failed:
        fetched(store, parts, checkpoint, staging)
    assert (failed.value.status, failed.value.code, failed.value.key) == (404, "NoSuchKey", pack)
    assert list(staging.iterdir()) == []


def test_a_granted_put_used_twice_fails_with_the_stores_precondition_error(
    store: Store, tmp_path: Path
) -> None:
    (put,) = store.puts(SESSION, 1)
    sealed.http_put(put, put["key"], b"once")
    with pytest.raises(sealed.TransferFailed) as failed:
        sealed.http_put(put, put["key"], b"twice")
    assert (failed.value.status, failed.value.code) == (412, "PreconditionFailed")
    unsigned = dict(put, headers={})
    with pytest.raises(sealed.TransferFailed) as refused:
        sealed.http_put(unsigned, put["key"], b"again")
    assert refused.value.status == 403


def test_a_take_over_many_packs_writes_them_to_the_granted_keys_in_order_and_reads_back(
    store: Store, parts: CheckpointParts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct, "PACK_TARGET", 100_000)
    _, sent, chunks = first_take(tmp_path)
    checkpoint, data_key = new_checkpoint(parts, SESSION)
    grant = store.grant(SESSION, checkpoint.id, data_key)
    answer = direct.store(grant, sent, str(chunks), None)
    granted = [p["key"] for p in grant["puts"]]
    assert len(answer["objects"]) >= 5
    assert list(answer["objects"]) == granted[: len(answer["objects"])]
    assert answer["root"]["key"] == granted[len(answer["objects"]) - 1]
    monkeypatch.undo()
    recorded, _ = sandbox_take(store, parts, SESSION, sent, chunks, None)
    many = checkpoint.model_copy(update={"format": 2, "packs": answer["packs"],
                                         "parts": [recorded.parts[0].model_copy(update={
                                             **answer["root"], "name": "manifest"})]})  # fmt: skip
    assert len(many.packs) >= 5
    assert fetched(store, parts, many, tmp_path / "staging") == rebuilt(parts, many)
    assert rebuilt(parts, many) == rebuilt(parts, recorded)


def test_a_root_that_is_not_the_records_fails_the_fetch(
    store: Store, parts: CheckpointParts, tmp_path: Path
) -> None:
    _, sent, chunks = first_take(tmp_path)
    checkpoint, _ = sandbox_take(store, parts, SESSION, sent, chunks, None)
    grant = store.read_grant(checkpoint, parts.data_key(checkpoint))
    grant["root_sha256"] = "0" * 64
    with pytest.raises(sealed.Corrupt, match="does not match its record"):
        direct.fetch(grant, str(tmp_path))


def test_a_store_that_cannot_be_reached_fails_without_quoting_the_signed_url() -> None:
    request = {"method": "GET", "url": "http://127.0.0.1:1/b/k?X-Goog-Signature=cafe1234",
               "headers": {}}  # fmt: skip
    with pytest.raises(sealed.TransferFailed) as failed:
        sealed.http_get(request, "k", 0, 10, timeout=5)
    assert failed.value.status is None and "cafe1234" not in str(failed.value)
    with pytest.raises(sealed.TransferFailed) as malformed:
        sealed.http_get(dict(request, url="nowhere:?X-Goog-Signature=cafe1234"), "k")
    assert "cafe1234" not in str(malformed.value)


def test_sealing_is_required_to_work_and_unavailable_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sealed.require()

    def broken(key: bytes) -> None:
        raise ImportError("libssl.so.3: cannot open shared object file")

    monkeypatch.setattr(sealed, "_aead", broken)
    with pytest.raises(sealed.Unavailable, match="ImportError: libssl"):
        sealed.require()


def test_a_take_that_needs_more_objects_than_granted_fails_before_its_root(
    store: Store, parts: CheckpointParts, tmp_path: Path
) -> None:
    _, sent, chunks = first_take(tmp_path)
    checkpoint, data_key = new_checkpoint(parts, SESSION)
    grant = dict(store.grant(SESSION, checkpoint.id, data_key))
    grant["puts"] = grant["puts"][:1]
    with pytest.raises(sealed.SealedError, match="more objects than were granted"):
        direct.store(grant, sent, str(chunks), None)


def crypto_folder(tmp_path: Path) -> Path:
    """``cryptography`` and cffi's backend alone in a folder, as a sandbox gets them."""
    import _cffi_backend
    import cryptography

    folder = tmp_path / "crypto"
    folder.mkdir()
    os.symlink(Path(cryptography.__file__).parent, folder / "cryptography")
    backend = Path(_cffi_backend.__file__)
    os.symlink(backend, folder / backend.name)
    return folder


def installed(tmp_path: Path) -> Path:
    """sealed.py, manifests.py and direct.py alone in a hangar/agent package, as the sandbox's
    toolkit holds them."""
    lib = tmp_path / "lib"
    (lib / "hangar" / "agent").mkdir(parents=True)
    (lib / "hangar" / "__init__.py").write_text("")
    (lib / "hangar" / "agent" / "__init__.py").write_text("")
    for module in (sealed, manifests, direct):
        source = Path(str(module.__file__))
        shutil.copy(source, lib / "hangar" / "agent" / source.name)
    return lib


ISOLATED = """
import json, sys
sys.path[:0] = sys.argv[1:3]
from hangar.agent import direct
job = json.load(sys.stdin)
answer = direct.store(job["grant"], job["sent"], job["chunks"], None)
print(json.dumps({"answer": answer, "modules": sorted(m for m in sys.modules if m.startswith(
    ("hangar", "pydantic", "site")))}))
"""

FETCH = """
import json, sys
sys.path[:0] = sys.argv[1:3]
from hangar.agent import direct
print(json.dumps(direct.fetch(json.load(sys.stdin), sys.argv[3])))
"""


def test_a_store_and_a_fetch_run_in_an_isolated_python_without_site(
    store: Store, parts: CheckpointParts, tmp_path: Path
) -> None:
    _, sent, chunks = first_take(tmp_path)
    checkpoint, data_key = new_checkpoint(parts, SESSION)
    job = {"grant": store.grant(SESSION, checkpoint.id, data_key), "sent": sent,
           "chunks": str(chunks)}  # fmt: skip
    python = shutil.which("python3", path="/usr/bin") or sys.executable
    argv = [python, "-I", "-S", "-c", ISOLATED, str(installed(tmp_path)),
            str(crypto_folder(tmp_path))]  # fmt: skip
    done = subprocess.run(argv, input=json.dumps(job).encode(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    out = json.loads(done.stdout)
    assert out["modules"] == ["hangar", "hangar.agent", "hangar.agent.direct",
                              "hangar.agent.manifests", "hangar.agent.sealed"]
    root = out["answer"]["root"]
    recorded = checkpoint.model_copy(update={
        "format": 2, "packs": out["answer"]["packs"],
        "parts": [CheckpointPart(name="manifest", size=root["size"],
                                 stored_size=root["stored_size"], sha256=root["sha256"],
                                 key=root["key"])]})  # fmt: skip
    staging = tmp_path / "staging"
    staging.mkdir()
    argv[4] = FETCH
    grant = store.read_grant(recorded, data_key)
    done = subprocess.run([*argv, str(staging)], input=json.dumps(grant).encode(),
                          capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    paths = json.loads(done.stdout)
    assert list(paths) == ["repo.bundle", "untracked"]
    assert {Path(p).name: Path(p).read_bytes() for p in paths.values()} == rebuilt(parts, recorded)
