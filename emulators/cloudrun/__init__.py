"""A stand-in for the Cloud Run Admin API v2 (services: list, get, getIamPolicy).

Google ships no Cloud Run emulator; the official client talks REST to this one:
``ServicesClient(credentials=AnonymousCredentials(), transport="rest",
client_options=ClientOptions(api_endpoint=CloudRunStandIn().url))``. ``hangar doctor`` reaches it
through ``HANGAR_RUN_ENDPOINT``.
"""

from __future__ import annotations

from .server import CloudRunStandIn, service_doc

__all__ = ["CloudRunStandIn", "service_doc"]
