"""A stand-in for the Cloud KMS REST API (encrypt and decrypt only).

Google ships no KMS emulator; the official client talks REST to this one:
``KeyManagementServiceClient(credentials=AnonymousCredentials(), transport="rest",
client_options=ClientOptions(api_endpoint=KmsStandIn().url))``.
"""

from __future__ import annotations

from .server import KmsStandIn, crc32c

__all__ = ["KmsStandIn", "crc32c"]
