"""The Google client libraries' exceptions are mapped by one table, every class named."""

from __future__ import annotations

import importlib
import inspect

import pytest

from hangar.errors import AlreadyExists, BackendError, HangarError, VersionConflict
from hangar.gcloud import TABLE, translate, vendor_errors

MODULES = ("google.api_core.exceptions", "google.auth.exceptions")


def vendor_classes() -> list[tuple[str, str, type[BaseException]]]:
    found = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == module_name:
                found.append((module_name, name, cls))
    return found


def test_every_google_exception_class_is_named_in_the_table() -> None:
    missing = [f"{m}.{n}" for m, n, _ in vendor_classes() if (m, n) not in TABLE]
    assert missing == [], f"map these in hangar/gcloud.py: {missing}"


@pytest.mark.parametrize("module,name,cls", vendor_classes(), ids=lambda v: str(v))
def test_each_google_exception_becomes_the_hangar_error_its_entry_says(
    module: str, name: str, cls: type[BaseException]
) -> None:
    try:
        exc = cls("the service said no")
    except TypeError:  # some take more arguments: an instance without __init__ still maps
        exc = cls.__new__(cls)
    mapped = translate(exc, "doing a thing")
    assert isinstance(mapped, HangarError) and type(mapped) is TABLE[(module, name)]
    assert mapped.message.startswith("doing a thing: ") and mapped.data["vendor"] == name


def test_the_kinds_that_mean_something_to_a_caller() -> None:
    from google.api_core import exceptions as api

    assert type(translate(api.AlreadyExists("x"), "create")) is AlreadyExists
    assert type(translate(api.Aborted("x"), "commit")) is VersionConflict
    assert type(translate(api.PreconditionFailed("x"), "put")) is VersionConflict
    assert type(translate(api.ServiceUnavailable("x"), "read")) is BackendError
    assert BackendError.status == 503


def test_what_backends_catch_covers_every_vendor_exception() -> None:
    caught = vendor_errors()
    for _, _, cls in vendor_classes():
        assert issubclass(cls, caught), cls
