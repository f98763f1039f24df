"""What every doctor check shares: the report (one line per check) and probes bounded in time.

Levels: ``OK`` (checked and fine), ``INFO`` (worth knowing, nothing wrong), ``WARN`` (works, but
not as recommended), ``FAIL`` (broken: doctor exits 1). Lines never carry secrets: no token, no
key material, no environment value other than the backend URLs.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

from hangar.errors import HangarError
from hangar.inert import inert

T = TypeVar("T")

# urllib3's "HTTPConnectionPool(host=..., port=...): Max retries exceeded ... [Errno 111]
# Connection refused ...", which requests wraps in every connection failure: shortened.
_POOL = re.compile(
    r"HTTPS?ConnectionPool\(host='(?P<host>[^']*)', port=(?P<port>\d+)\)"
    r"(?:.*?\[Errno -?\d+\] (?P<why>[^'\")]+)|)[^\n]*"
)

PROBE_SECONDS = 10.0
"""How long each backend or API probe may take before it is a FAIL."""


class Report:
    def __init__(self) -> None:
        self.failed = False

    def line(self, level: str, text: str) -> None:
        self.failed = self.failed or level == "FAIL"
        print(inert(f"{level:4}  {text}", lines=True), flush=True)  # probes quote sandboxes

    def check(self, ok: bool, good: str, bad: str, level: str = "FAIL") -> bool:
        self.line("OK", good) if ok else self.line(level, bad)
        return ok


class ProbeTimeout(Exception):
    """A probe did not return in time (it is left running in a daemon thread)."""


def within(seconds: float, probe: Callable[[], T]) -> T:
    """``probe()``'s result, or its exception re-raised here; ProbeTimeout when it takes longer
    than ``seconds``. Client libraries each have their own timeouts and retries (some retry a
    refused connection for two minutes): this bounds them all the same way."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(probe())
        except BaseException as exc:  # noqa: BLE001 - relayed to the caller, not handled here
            errors.append(exc)

    thread = threading.Thread(target=run, name="doctor-probe", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise ProbeTimeout(f"no answer within {seconds:g} s")
    if errors:
        raise errors[0]
    return results[0]


def vendor_errors() -> tuple[type[BaseException], ...]:
    """Failures the Google clients raise (service answers, credentials, transport), and OSError.
    Imported only when an exception needs matching, so embedded runs never load them."""
    from hangar import gcloud

    return (*gcloud.vendor_errors(), OSError)


def describe(exc: BaseException) -> str:
    """One short line for a failure: a hangar error's message and code, a Google error's message
    and status, else the exception's text; connection failures shortened."""
    code = getattr(exc, "code", None)
    message = getattr(exc, "message", None)
    text = message if isinstance(message, str) and message else str(exc)
    if type(exc).__name__ == "DefaultCredentialsError":
        text = f"no Google credentials (gcloud auth application-default login): {text}"
    text = _POOL.sub(
        lambda m: f"cannot connect to {m['host']}:{m['port']} ({m['why'] or 'no connection'})",
        text,
    )
    lines = text.strip().splitlines()
    first = lines[0] if lines else type(exc).__name__
    first = first if len(first) <= 300 else first[:297] + "..."
    return f"{first} ({code})" if code else first


def fetch(report: Report, label: str, seconds: float, run: Callable[[], T]) -> T | None:
    """``run()`` within ``seconds``; on a hangar error, a Google client error or a timeout, a
    FAIL line ``label: WHY`` and None. ``label`` names the setting to fix (``blobs
    (HANGAR_SESSION_STORE gs://b/p)``)."""
    try:
        return within(seconds, run)
    except ProbeTimeout as exc:
        report.line("FAIL", f"{label}: {exc}")
    except HangarError as exc:
        report.line("FAIL", f"{label}: {describe(exc)}")
    except vendor_errors() as exc:
        report.line("FAIL", f"{label}: {describe(exc)}")
    return None


def probe(report: Report, label: str, seconds: float, run: Callable[[], str]) -> bool:
    """:func:`fetch`, with an OK line ``label: RESULT`` when ``run`` returns."""
    detail = fetch(report, label, seconds, run)
    if detail is None:
        return False
    report.line("OK", f"{label}: {detail}")
    return True


def shown(url: str) -> str:
    """A URL fit to print: any user info (a password) masked."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))
