"""The IAM Credentials stand-in: signBlob on its REST wire, through the official client and raw,
and the service account key files it makes for tests."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from google.api_core import exceptions as api_exceptions

from emulators.iam import IamStandIn, ServiceAccountKey

ACCOUNT = "hangar-api@hangar-local.iam.gserviceaccount.com"
_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def iam() -> Iterator[IamStandIn]:
    with IamStandIn(accounts=[ACCOUNT]) as stand_in:
        yield stand_in


def _client(url: str) -> Any:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import iam_credentials_v1

    return iam_credentials_v1.IAMCredentialsClient(
        credentials=AnonymousCredentials(), transport="rest",
        client_options=ClientOptions(api_endpoint=url),
    )  # fmt: skip


def _verify(public_key_pem: bytes, signature: bytes, payload: bytes) -> None:
    public = serialization.load_pem_public_key(public_key_pem)
    assert isinstance(public, rsa.RSAPublicKey)
    public.verify(signature, payload, padding.PKCS1v15(), hashes.SHA256())


def _post(url: str, body: object) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_official_client_gets_a_signature_the_accounts_public_key_verifies(
    iam: IamStandIn,
) -> None:
    response = _client(iam.url).sign_blob(
        request={"name": f"projects/-/serviceAccounts/{ACCOUNT}", "payload": b"to be signed"})
    _verify(iam.public_key_pem(ACCOUNT), response.signed_blob, b"to be signed")
    with pytest.raises(InvalidSignature):
        _verify(iam.public_key_pem(ACCOUNT), response.signed_blob, b"something else")
    assert response.key_id == iam.add_account(ACCOUNT).key_id


def test_an_unknown_account_is_not_found_in_googles_error_shape(iam: IamStandIn) -> None:
    with pytest.raises(api_exceptions.NotFound):
        _client(iam.url).sign_blob(request={
            "name": "projects/-/serviceAccounts/nobody@x.iam.gserviceaccount.com",
            "payload": b"p"})  # fmt: skip
    status, body = _post(f"{iam.url}/v1/projects/-/serviceAccounts/nobody@x:signBlob",
                         {"payload": "cA=="})  # fmt: skip
    assert status == 404
    assert body["error"]["code"] == 404 and body["error"]["status"] == "NOT_FOUND"
    with pytest.raises(KeyError):
        iam.public_key_pem("nobody@x")


@pytest.mark.parametrize("body", [{}, {"payload": ""}, {"payload": "not base64!"},
                                  {"payload": 5}, {"payload": "cA==", "delegates": "x"},
                                  {"payload": "cA==", "delegates": ["someone@x"]}])  # fmt: skip
def test_a_bad_request_body_is_invalid_argument(iam: IamStandIn, body: dict[str, Any]) -> None:
    status, answer = _post(f"{iam.url}/v1/projects/-/serviceAccounts/{ACCOUNT}:signBlob", body)
    assert (status, answer["error"]["status"]) == (400, "INVALID_ARGUMENT")


def test_a_project_instead_of_the_wildcard_is_invalid_argument(iam: IamStandIn) -> None:
    status, answer = _post(f"{iam.url}/v1/projects/p1/serviceAccounts/{ACCOUNT}:signBlob",
                           {"payload": "cA=="})  # fmt: skip
    assert (status, answer["error"]["status"]) == (400, "INVALID_ARGUMENT")


def test_the_raw_wire_answers_key_id_and_signed_blob_and_takes_known_delegates(
    iam: IamStandIn,
) -> None:
    other = "delegate@hangar-local.iam.gserviceaccount.com"
    iam.add_account(other)
    status, answer = _post(
        f"{iam.url}/v1/projects/-/serviceAccounts/{ACCOUNT}:signBlob",
        {"payload": base64.b64encode(b"abc").decode(),
         "delegates": [f"projects/-/serviceAccounts/{other}"]})  # fmt: skip
    assert status == 200 and set(answer) == {"keyId", "signedBlob"}
    _verify(iam.public_key_pem(ACCOUNT), base64.b64decode(answer["signedBlob"]), b"abc")
    status, answer = _post(
        f"{iam.url}/v1/projects/-/serviceAccounts/{ACCOUNT}:signBlob",
        {"payload": "cA==", "delegates": ["projects/-/serviceAccounts/stranger@x"]})
    assert (status, answer["error"]["status"]) == (404, "NOT_FOUND")


def test_an_account_added_with_a_key_signs_with_that_key(iam: IamStandIn) -> None:
    key = ServiceAccountKey.generate("given@hangar-local.iam.gserviceaccount.com")
    added = iam.add_account(key.email, key.private_key_pem)
    assert (added.key_id, iam.public_key_pem(key.email)) == (key.key_id, key.public_key_pem)
    response = _client(iam.url).sign_blob(
        request={"name": f"projects/-/serviceAccounts/{key.email}", "payload": b"x"})
    _verify(key.public_key_pem, response.signed_blob, b"x")
    assert iam.add_account(key.email) == added  # no key given: the one it has stays


def test_a_key_file_reads_as_googles_service_account_credentials(tmp_path: Path) -> None:
    from google.oauth2 import service_account

    key = ServiceAccountKey.generate("file@hangar-local.iam.gserviceaccount.com")
    path = key.write_key_file(tmp_path / "key.json", project_id="p1")
    assert path.stat().st_mode & 0o777 == 0o600
    doc = json.loads(path.read_text())
    assert doc["type"] == "service_account" and doc["project_id"] == "p1"
    assert doc["private_key_id"] == key.key_id and doc["client_email"] == key.email
    credentials = service_account.Credentials.from_service_account_file(str(path))
    assert credentials.signer_email == key.email
    _verify(key.public_key_pem, credentials.sign_bytes(b"m"), b"m")


def test_python_m_emulators_iam_serves_the_accounts_it_is_given() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulators.iam", "--port", "0", "--account", ACCOUNT],
        cwd=_ROOT, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("iam stand-in listening on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[1].strip()
        status, answer = _post(f"{url}/v1/projects/-/serviceAccounts/{ACCOUNT}:signBlob",
                               {"payload": "cA=="})  # fmt: skip
        assert status == 200 and answer["signedBlob"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
