"""hangar/private.py: folders made 0700 level by level, files made 0600, and a data folder left
open tightened (hangar's own paths only; a shared sticky folder named, not changed)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hangar.private import loose, private_dirs, private_file, tighten


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_private_dirs_makes_every_missing_level_0700_and_leaves_existing_ones(
    tmp_path: Path,
) -> None:
    (tmp_path / "kept").mkdir(mode=0o755)
    private_dirs(tmp_path / "kept" / "a" / "b")
    private_dirs(tmp_path / "kept" / "a" / "b")  # again: nothing to do
    assert [mode(tmp_path / p) for p in ("kept", "kept/a", "kept/a/b")] == [0o755, 0o700, 0o700]


def test_private_file_creates_0600_and_leaves_an_existing_file_as_it_is(tmp_path: Path) -> None:
    private_file(tmp_path / "new")
    (tmp_path / "old").write_text("kept")
    private_file(tmp_path / "old")
    assert mode(tmp_path / "new") == 0o600 and (tmp_path / "new").read_bytes() == b""
    assert (tmp_path / "old").read_text() == "kept"


def test_tighten_takes_others_access_away_from_hangars_paths_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "blobs").mkdir(parents=True)
    data.chmod(0o755)
    for name in ("hangar.db", "hangar.db-wal", "admin-token", "someone-elses.txt"):
        (data / name).write_text("x")
        (data / name).chmod(0o644)
    (data / "vault.key").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text("k")
    (tmp_path / "elsewhere").chmod(0o644)

    said = tighten(data)

    assert sorted(said) == sorted([f"{data} had mode 755; made it 700",
                                   f"{data}/blobs had mode 755; made it 700",
                                   f"{data}/hangar.db had mode 644; made it 600",
                                   f"{data}/hangar.db-wal had mode 644; made it 600",
                                   f"{data}/admin-token had mode 644; made it 600"])  # fmt: skip
    assert mode(data) == 0o700 and mode(data / "admin-token") == 0o600
    assert mode(data / "someone-elses.txt") == 0o644  # not hangar's
    assert mode(tmp_path / "elsewhere") == 0o644  # a link is not followed
    assert loose(data) == [] and tighten(data) == []


def test_tighten_makes_a_missing_data_folder_and_names_a_shared_one_without_changing_it(
    tmp_path: Path,
) -> None:
    assert tighten(tmp_path / "new" / "data") == []
    assert mode(tmp_path / "new") == mode(tmp_path / "new" / "data") == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    (shared / "admin-token").write_text("x")
    said = tighten(shared)
    assert said[0] == f"{shared} is a shared folder (mode 1777): use a data folder of its own " \
        "(HANGAR_DATA_DIR)"  # fmt: skip
    assert mode(shared) == 0o1777 and mode(shared / "admin-token") == 0o600
