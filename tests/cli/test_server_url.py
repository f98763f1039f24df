"""The URL ``hangar serve`` announces is the one the CLI takes in ``HANGAR_URL``, and a
``HANGAR_URL`` given with the API's ``/api`` on it reaches the same server."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from hangar.server.serve import banner
from hangar.cli.client import base_url
from tests.cli.conftest import Cli, Server


def test_the_start_banner_names_the_base_url_the_cli_takes_in_hangar_url(
    server: Server, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    [said] = [line.decode() for line in server.output if b"serving " in line]
    url = said.split("serving ", 1)[1].split()[0]
    assert urlsplit(url).path == "" and urlsplit(url).hostname == "127.0.0.1"
    assert "HANGAR_URL" in said and "/api/api" not in said
    monkeypatch.setenv("HANGAR_URL", url)
    code, out, err = cli("session", "list", "--json")
    assert (code, err) == (0, "") and json.loads(out)["sessions"] == []


@pytest.mark.parametrize("suffix", ["/api", "/api/", "/"])
def test_a_hangar_url_ending_in_api_reaches_the_same_server(
    server: Server, cli: Cli, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    monkeypatch.setenv("HANGAR_URL", server.url + suffix)
    code, out, err = cli("session", "list", "--json")
    assert (code, err) == (0, "") and json.loads(out)["sessions"] == []
    code, out, err = cli("session", "get", "nope")  # /api/api/... would be a bare not_found
    assert code == 1 and err.rstrip().endswith("(session_not_found)")


def test_base_url_drops_only_a_trailing_api_path() -> None:
    assert base_url("http://127.0.0.1:8080/api") == "http://127.0.0.1:8080"
    assert base_url("http://127.0.0.1:8080/api/") == "http://127.0.0.1:8080"
    assert base_url("https://example.com/hangar/api") == "https://example.com/hangar"
    assert base_url("http://api:8080/") == "http://api:8080"  # a host named api stays
    assert base_url("http://api") == "http://api"
    assert base_url("http://h/apiary") == "http://h/apiary"


def test_a_wildcard_bind_is_announced_on_loopback_with_the_address_it_listens_on() -> None:
    data = Path("/srv/hangar")
    assert banner("127.0.0.1", 8080, data) == (
        "serving http://127.0.0.1:8080 (the CLI's HANGAR_URL; the dashboard at /, the REST API "
        "under /api; data in /srv/hangar)")  # fmt: skip
    anywhere = banner("0.0.0.0", 9000, data)
    assert anywhere.startswith("serving http://127.0.0.1:9000 (")
    assert "bound to 0.0.0.0:9000" in anywhere
    assert banner("::", 9000, data).startswith("serving http://[::1]:9000 (")
    assert "bound to" not in banner("::1", 9000, data)
