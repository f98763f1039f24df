from __future__ import annotations

import io
import os

import pytest

from hangar.errors import DecryptionFailed
from hangar.keys.envelope import CHUNK, new_data_key, part_aad, seal, seal_bytes, unseal, unseal_bytes

AAD = part_aad("ses-1", "ckp-1", "wip.patch")


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK])
def test_sealed_data_of_any_size_opens_to_the_same_bytes(size: int) -> None:
    key = new_data_key()
    data = os.urandom(size)
    sealed = seal_bytes(key, AAD, data)
    # A ciphertext cannot contain the plaintext (short inputs could match by chance).
    assert size < 16 or data not in sealed
    assert unseal_bytes(key, AAD, sealed) == data


def test_chunks_of_any_size_are_sealed_as_one_stream() -> None:
    key = new_data_key()
    pieces = [os.urandom(n) for n in (5, CHUNK + 7, 3, CHUNK * 2)]
    sealed = b"".join(seal(key, AAD, pieces))
    assert b"".join(unseal(key, AAD, io.BytesIO(sealed))) == b"".join(pieces)


def test_a_flipped_bit_fails_to_open() -> None:
    key = new_data_key()
    sealed = bytearray(seal_bytes(key, AAD, b"x" * 1000))
    sealed[40] ^= 0x80
    with pytest.raises(DecryptionFailed):
        unseal_bytes(key, AAD, bytes(sealed))


def test_a_stream_truncated_at_a_chunk_boundary_fails_to_open() -> None:
    key = new_data_key()
    sealed = seal_bytes(key, AAD, os.urandom(2 * CHUNK + 10))
    header = 12
    truncated = sealed[: header + 2 * (CHUNK + 16)]
    with pytest.raises(DecryptionFailed):
        unseal_bytes(key, AAD, truncated)


def test_a_part_bound_to_another_checkpoint_fails_to_open() -> None:
    key = new_data_key()
    sealed = seal_bytes(key, AAD, b"conversation")
    with pytest.raises(DecryptionFailed):
        unseal_bytes(key, part_aad("ses-1", "ckp-2", "wip.patch"), sealed)
    with pytest.raises(DecryptionFailed):
        unseal_bytes(key, part_aad("ses-2", "ckp-1", "wip.patch"), sealed)
    with pytest.raises(DecryptionFailed):
        unseal_bytes(key, part_aad("ses-1", "ckp-1", "agent.tar.zst"), sealed)


def test_the_wrong_key_fails_to_open() -> None:
    sealed = seal_bytes(new_data_key(), AAD, b"data")
    with pytest.raises(DecryptionFailed):
        unseal_bytes(new_data_key(), AAD, sealed)


def test_data_that_is_not_sealed_fails_to_open() -> None:
    with pytest.raises(DecryptionFailed):
        unseal_bytes(new_data_key(), AAD, b"plain text, not sealed")
