"""The data folder is hangar's alone: ``hangar serve`` on a folder left open tightens it, and
after a session has written its blobs every folder hangar made there is 0700 and every file
0600 (a sandbox's own tree keeps the modes its users need; its records are hangar's, 0600)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, Server
from tests.cli.test_cli import identity

TURN = "run: echo done > done.txt && hangar-agent artifact done.txt"


@pytest.fixture
def left_open(tmp_path: Path) -> Path:
    """The data folder as an older hangar left it: 0755, with a 0644 token (requested before
    ``server``, so it is there when serve starts)."""
    data = tmp_path / "data"
    (data / "blobs").mkdir(parents=True)
    data.chmod(0o755)
    (data / "admin-token").write_text("an-older-admin-secret\n")
    (data / "admin-token").chmod(0o644)
    return data


def modes(data: Path) -> dict[str, int]:
    """Every path under ``data`` and its mode, but inside a sandbox's folder only its records."""
    found = {".": stat.S_IMODE(data.stat().st_mode)}
    for folder, dirs, files in os.walk(data):
        rel = Path(folder).relative_to(data)
        if rel.parent == Path("sandboxes"):
            dirs.clear()
            files = [f for f in files if f in ("record.json", "init.log")]
        for name in [*dirs, *files]:
            found[str(rel / name)] = stat.S_IMODE((Path(folder) / name).lstat().st_mode)
    return found


@pytest.mark.sandbox
def test_serve_tightens_an_open_data_folder_and_everything_it_writes_there_is_private(
    left_open: Path, server: Server, cli: Cli, remote: Path
) -> None:
    said = b"".join(server.output).decode()
    assert f"{left_open} had mode 755; made it 700" in said
    assert f"{left_open}/admin-token had mode 644; made it 600" in said
    assert cli("env", "add", "app", "--repo", str(remote), *identity())[0] == 0
    code, out, err = cli("session", "new", "m", TURN, "--env", "app", "--harness",
                         "antigravity", "-w")  # fmt: skip
    assert code == 0 and "artifact: done.txt" in out, err

    found = modes(left_open)
    for name in ("hangar.db", "hangar.db-wal", "hangar.db-shm", "admin-token", "vault.key"):
        assert found[name] == 0o600, (name, oct(found[name]))
    assert any(p.startswith("blobs/sessions/") and "/artifacts/" in p for p in found)
    assert any(p.endswith("record.json") for p in found)
    opened = {p: oct(m) for p, m in found.items()
              if m != (0o700 if (left_open / p).is_dir() else 0o600)}  # fmt: skip
    sandboxes = {p for p in opened if Path(p).parent == Path("sandboxes")}
    assert all(opened[p] == "0o711" for p in sandboxes)  # each sandbox's folder, by design
    assert {p: m for p, m in opened.items() if p not in sandboxes} == {}
