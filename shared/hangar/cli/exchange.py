"""The CLI's side of the context exchange (spec 004): ``--file``, ``--text`` and
``--from-local`` become a turn's context items, large ones uploaded in parts first; and
``session pull`` brings a session's code back into the checkout.

Progress of uploads goes to stderr, like ``-w``'s, so ``--json`` output stays clean.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import sys
from pathlib import Path
from typing import Any

from hangar.cli import UsageError
from hangar.cli.client import Client, session_path
from hangar.cli.render import say
from hangar.exchange import is_text
from hangar.cli.localgit import PullPackage, apply_pull, from_local

INLINE_BYTES = 4 << 20
"""An item up to this size rides in the request (base64 adds a third); larger ones go up
first, in parts (the server's part size, under its body limit)."""


def context_items(api: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The context items the arguments ask for, large ones uploaded already."""
    items: list[dict[str, Any]] = []
    for name in args.file or []:
        path = Path(name)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"--file: cannot read {name}: {exc.strerror}") from None
        items.append(_item(api, "file", data, name=path.name))
    for text in args.text or []:
        items.append({"kind": "text", "content": text})
    if args.from_local:
        work = from_local(Path.cwd())
        for note in work.notes:
            say(f"hangar: --from-local: {note}", err=True)
        if work.bundle is not None:
            items.append(_item(api, "bundle", work.bundle, base_commit=work.base_commit))
        if work.patch is not None:
            items.append(_item(api, "patch", work.patch))
    return items


def _item(api: Client, kind: str, data: bytes, **fields: Any) -> dict[str, Any]:
    if len(data) > INLINE_BYTES:
        return {"kind": kind, "upload_id": upload(api, kind, data), **fields}
    if kind in ("file", "patch") and is_text(data):
        return {"kind": kind, "content": data.decode(), **fields}
    return {"kind": kind, "content": base64.b64encode(data).decode(), "encoding": "base64",
            **fields}  # fmt: skip


def upload(api: Client, kind: str, data: bytes) -> str:
    """Send ``data`` as an upload in the server's part size, saying how far it got; returns
    its id, complete."""
    started = api.call("POST", "/api/uploads", {"kind": kind})
    upload_id, part = str(started["upload_id"]), int(float(started["part_mb"]) * 2**20)
    total = len(data)
    for n, offset in enumerate(range(0, total, part), start=1):
        api.put_bytes(f"/api/uploads/{upload_id}/parts/{n}", data[offset:offset + part])
        done = min(offset + part, total)
        print(f"hangar: uploading the {kind}: {done / 2**20:.1f} of {total / 2**20:.1f} MiB",
              file=sys.stderr)  # fmt: skip
    api.call("POST", f"/api/uploads/{upload_id}/complete",
             {"sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
    return upload_id


def pull(api: Client, args: argparse.Namespace) -> int:
    """``session pull NAME [--checkout] [--force]``: the newest checkpoint's commits on local
    branch ``hangar/<name>``; with ``--checkout``, switched to with its uncommitted changes."""
    from hangar.exchange.pull import read_package  # pydantic: only pull pays for it

    raw = api.call("GET", session_path(args.name, "pull"))
    info, members = read_package(io.BytesIO(raw))
    package = PullPackage(head=info.head, base=info.base, bundle=members.get("repo.bundle"),
                          patch=members.get("changes.patch"), patch_base=info.patch_base,
                          warnings=info.warnings)  # fmt: skip
    outcome = apply_pull(Path.cwd(), args.name, package, checkout=args.checkout,
                         force=args.force)  # fmt: skip
    moved = {"created": "made", "fast-forward": "fast-forwarded", "unchanged": "already at",
             "forced": "moved (--force)"}[outcome.moved]  # fmt: skip
    say(f"{outcome.branch} {moved} {outcome.head[:12]} (checkpoint {info.checkpoint}, "
        f"{info.taken_at:%Y-%m-%d %H:%M} UTC)")  # fmt: skip
    if outcome.checked_out:
        applied = "with its uncommitted changes" if outcome.applied else "(no uncommitted changes)"
        say(f"switched to {outcome.branch} {applied}")
    for note in outcome.notes:
        say(f"hangar: {note}", err=True)
    return 0
