"""A stand-in for the IAM Service Account Credentials API (``signBlob`` only), and service
account keys as Google issues them.

Google ships no IAM emulator; the official client talks REST to this one:
``IAMCredentialsClient(credentials=AnonymousCredentials(), transport="rest",
client_options=ClientOptions(api_endpoint=IamStandIn().url))``. hangar reaches it through
``HANGAR_IAM_ENDPOINT`` when it signs URLs as ``HANGAR_SIGNING_SERVICE_ACCOUNT``.
"""

from __future__ import annotations

from .keys import ServiceAccountKey
from .server import IamStandIn

__all__ = ["IamStandIn", "ServiceAccountKey"]
