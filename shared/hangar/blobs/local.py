"""Blobs in a local folder (``file:///ABS/PATH``): one file per key.

Writes go to a temporary file in the same folder, are flushed to disk, then renamed into place
(or hard-linked, for create-only puts, so that an existing key is never replaced).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from hangar.blobs import check_key, check_range
from hangar.errors import AlreadyExists, BackendError, BlobNotFound, InvalidSettings
from hangar.private import private_dirs


class LocalBlobs:
    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def from_url(cls, url: str) -> LocalBlobs:
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise InvalidSettings(
                f"HANGAR_SESSION_STORE: expected file:///ABSOLUTE/PATH, got {url!r}",
                setting="HANGAR_SESSION_STORE",
            )
        return cls(Path(unquote(parts.path)))

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put(self, key: str, data: bytes | Iterable[bytes], *, if_absent: bool = False) -> int:
        path = self._path(key)
        try:
            private_dirs(path.parent)  # files are 0600 already: mkstemp makes them so
            if if_absent and path.exists():
                raise AlreadyExists(f"blob {key!r} exists", key=key)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".put-")
            size = 0
            try:
                with os.fdopen(fd, "wb") as out:
                    for chunk in [data] if isinstance(data, bytes) else data:
                        out.write(chunk)
                        size += len(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                if if_absent:
                    try:
                        os.link(tmp, path)
                    except FileExistsError:
                        raise AlreadyExists(f"blob {key!r} exists", key=key) from None
                    os.unlink(tmp)
                else:
                    os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            raise BackendError(f"cannot write blob {key!r}: {exc.strerror}", key=key) from None
        return size

    @contextlib.contextmanager
    def open(self, key: str) -> Iterator[BinaryIO]:
        try:
            stream = self._path(key).open("rb")
        except FileNotFoundError:
            raise BlobNotFound(f"blob {key!r} not found", key=key) from None
        except OSError as exc:
            raise BackendError(f"cannot read blob {key!r}: {exc.strerror}", key=key) from None
        with stream:
            yield stream

    def get(self, key: str) -> bytes:
        with self.open(key) as stream:
            return stream.read()

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """The bytes ``[start, start + length)``, fewer where the file ends sooner: one seek
        and one read of the open file (of at most what the file holds there: a read allocates
        the length it is asked for)."""
        check_range(key, start, length)
        with self.open(key) as stream:
            try:
                size = os.fstat(stream.fileno()).st_size
                stream.seek(start)
                return stream.read(max(0, min(length, size - start)))
            except OSError as exc:
                raise BackendError(f"cannot read blob {key!r}: {exc.strerror}",
                                   key=key) from None  # fmt: skip

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise BackendError(f"cannot delete blob {key!r}: {exc.strerror}", key=key) from None
        # Drop folders left empty, up to the root, so a deleted session leaves nothing behind.
        parent = path.parent
        while parent != self.root and parent.is_relative_to(self.root):
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    def list(self, prefix: str = "") -> list[str]:
        if not self.root.is_dir():
            return []
        keys = []
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.startswith(".put-"):
                    continue
                key = os.path.relpath(os.path.join(dirpath, name), self.root).replace(os.sep, "/")
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)
