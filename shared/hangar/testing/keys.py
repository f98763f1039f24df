"""The keys conformance suite: subclass it and provide ``keys`` and ``other_keys`` fixtures
(two independent keys of the same backend)."""

from __future__ import annotations

import os

import pytest

from hangar.errors import DecryptionFailed
from hangar.keys import Keys


class KeysConformance:
    def test_unwrap_returns_the_wrapped_data_key(self, keys: Keys) -> None:
        data_key = os.urandom(32)
        assert keys.unwrap(keys.wrap(data_key)) == data_key

    def test_wrapping_twice_gives_different_bytes(self, keys: Keys) -> None:
        data_key = os.urandom(32)
        assert keys.wrap(data_key) != keys.wrap(data_key)

    def test_wrapped_key_does_not_contain_the_data_key(self, keys: Keys) -> None:
        data_key = os.urandom(32)
        assert data_key not in keys.wrap(data_key)

    def test_an_altered_wrapped_key_raises_decryption_failed(self, keys: Keys) -> None:
        wrapped = bytearray(keys.wrap(os.urandom(32)))
        wrapped[-1] ^= 0x01
        with pytest.raises(DecryptionFailed):
            keys.unwrap(bytes(wrapped))

    def test_garbage_raises_decryption_failed(self, keys: Keys) -> None:
        with pytest.raises(DecryptionFailed):
            keys.unwrap(b"not a wrapped key")

    def test_a_key_wrapped_by_another_key_does_not_unwrap(
        self, keys: Keys, other_keys: Keys
    ) -> None:
        wrapped = other_keys.wrap(os.urandom(32))
        with pytest.raises(DecryptionFailed):
            keys.unwrap(wrapped)
