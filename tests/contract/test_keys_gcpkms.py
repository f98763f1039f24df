"""The Cloud KMS keys backend, through the official client over REST, against the KMS stand-in."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hangar.config import Settings
from hangar.errors import DecryptionFailed, InvalidSettings
from hangar.keys import open_keys
from hangar.keys.gcpkms import GcpKmsKeys
from hangar.testing.keys import KeysConformance

from emulators.kms import KmsStandIn, crc32c

_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kms_stand_in() -> Iterator[str]:
    with KmsStandIn() as stand_in:
        yield stand_in.url


@pytest.fixture
def settings(kms_stand_in: str, tmp_path: Path) -> Settings:
    return Settings.build(data_dir=tmp_path, kms_endpoint=kms_stand_in)


def _key_url() -> str:
    return (
        "gcpkms://projects/hangar-test/locations/global/keyRings/ring"
        f"/cryptoKeys/k-{uuid.uuid4().hex[:12]}"
    )


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class TestGcpKmsKeysConformance(KeysConformance):
    @pytest.fixture
    def keys(self, settings: Settings) -> GcpKmsKeys:
        return GcpKmsKeys.from_url(_key_url(), settings)

    @pytest.fixture
    def other_keys(self, settings: Settings) -> GcpKmsKeys:
        return GcpKmsKeys.from_url(_key_url(), settings)


def test_open_keys_picks_gcpkms_for_its_scheme(settings: Settings) -> None:
    keys = open_keys(_key_url(), settings)
    assert isinstance(keys, GcpKmsKeys)
    data_key = os.urandom(32)
    assert keys.unwrap(keys.wrap(data_key)) == data_key


@pytest.mark.parametrize(
    "url",
    [
        "gcpkms://",
        "gcpkms://projects/p/locations/l/keyRings/r",
        "gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k/extra",
        "gcpkms://projects//locations/l/keyRings/r/cryptoKeys/k",
        "gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k?x=1",
    ],
)
def test_a_url_naming_no_crypto_key_is_refused(url: str, settings: Settings) -> None:
    with pytest.raises(InvalidSettings) as info:
        open_keys(url, settings)
    assert info.value.data["setting"] == "HANGAR_KEYS"


def test_building_the_backend_contacts_nothing(tmp_path: Path) -> None:
    # An endpoint nobody listens on: only wrap/unwrap would notice.
    settings = Settings.build(data_dir=tmp_path, kms_endpoint="http://127.0.0.1:9")
    keys = GcpKmsKeys.from_url(_key_url(), settings)
    assert keys._client is None


def test_the_stand_in_rejects_a_wrong_request_checksum(kms_stand_in: str) -> None:
    name = _key_url().removeprefix("gcpkms://")
    plaintext = os.urandom(32)
    status, body = _post(
        f"{kms_stand_in}/v1/{name}:encrypt",
        {
            "plaintext": base64.b64encode(plaintext).decode(),
            "plaintextCrc32c": str((crc32c(plaintext) + 1) % 2**32),
        },
    )
    assert status == 400
    error = body["error"]
    assert isinstance(error, dict)
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"


def test_the_stand_in_answers_checksums_as_the_service_does(kms_stand_in: str) -> None:
    name = _key_url().removeprefix("gcpkms://")
    plaintext = os.urandom(32)
    status, enc = _post(
        f"{kms_stand_in}/v1/{name}:encrypt",
        {
            "plaintext": base64.b64encode(plaintext).decode(),
            "plaintextCrc32c": str(crc32c(plaintext)),
        },
    )
    assert status == 200
    assert enc["verifiedPlaintextCrc32c"] is True
    assert str(enc["name"]).startswith(name + "/cryptoKeyVersions/")
    ciphertext = base64.b64decode(str(enc["ciphertext"]))
    assert enc["ciphertextCrc32c"] == str(crc32c(ciphertext))
    status, dec = _post(
        f"{kms_stand_in}/v1/{name}:decrypt",
        {"ciphertext": enc["ciphertext"], "ciphertextCrc32c": enc["ciphertextCrc32c"]},
    )
    assert status == 200
    assert base64.b64decode(str(dec["plaintext"])) == plaintext
    assert dec["plaintextCrc32c"] == str(crc32c(plaintext))


def test_a_wrong_ciphertext_checksum_raises_decryption_failed_through_the_client(
    settings: Settings,
) -> None:
    keys = GcpKmsKeys.from_url(_key_url(), settings)
    wrapped = keys.wrap(os.urandom(32))
    # Corrupt after the checksum is computed: the service sees a mismatch and refuses.
    status, _ = _post(
        f"{settings.kms_endpoint}/v1/{keys.key_name}:decrypt",
        {
            "ciphertext": base64.b64encode(wrapped).decode(),
            "ciphertextCrc32c": str(crc32c(wrapped) ^ 1),
        },
    )
    assert status == 400
    with pytest.raises(DecryptionFailed):
        keys.unwrap(wrapped[:-1] + bytes([wrapped[-1] ^ 1]))


def test_the_stand_in_cli_prints_its_url_and_serves(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulators.kms", "--port", "0"],
        cwd=_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        prefix = "kms stand-in listening on "
        assert line.startswith(prefix)
        url = line.removeprefix(prefix)
        settings = Settings.build(data_dir=tmp_path, kms_endpoint=url)
        keys = GcpKmsKeys.from_url(_key_url(), settings)
        data_key = os.urandom(32)
        assert keys.unwrap(keys.wrap(data_key)) == data_key
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_an_unreachable_endpoint_raises_backend_error(tmp_path: Path) -> None:
    from hangar.errors import BackendError

    with KmsStandIn() as stand_in:
        url = stand_in.url
    settings = Settings.build(data_dir=tmp_path, kms_endpoint=url)
    keys = GcpKmsKeys.from_url(_key_url(), settings)
    with pytest.raises(BackendError):
        keys.wrap(os.urandom(32))


def test_a_disabled_key_is_a_backend_error_not_a_bad_ciphertext(tmp_path: Path) -> None:
    from hangar.errors import BackendError

    with KmsStandIn() as stand_in:
        settings = Settings.build(data_dir=tmp_path, kms_endpoint=stand_in.url)
        keys = GcpKmsKeys.from_url(_key_url(), settings)
        wrapped = keys.wrap(os.urandom(32))
        stand_in.disable(keys.key_name)
        with pytest.raises(BackendError) as unwrapping:
            keys.unwrap(wrapped)
        assert not isinstance(unwrapping.value, DecryptionFailed)
        assert "DISABLED" in unwrapping.value.message
        with pytest.raises(BackendError):
            keys.wrap(os.urandom(32))
        stand_in.disable(keys.key_name, disabled=False)
        assert len(keys.unwrap(wrapped)) == 32
