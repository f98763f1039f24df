"""hangar's ``cryptography`` in a sandbox: installed into hangar's folder, and probed. Standard
library only; run as hangar through the launcher (``launch cryptokit ...``):

``cryptokit install NAME`` reads the folder as a gzipped tar on standard input (what
:func:`hangar.agent.toolkit.crypto_archive` makes) and puts it at ``LIB/NAME``
(``crypto-<digest>``), unpacked under a temporary name and renamed into place whole, unless that
name is there already (then the input is read and dropped); then points ``LIB/crypto`` at it, a
link renamed over the one there. ``LIB`` is the folder holding the scripts' own folder
(``/hangar/lib``: the agent may pass through it but can neither list nor change it). The
launcher puts ``LIB/crypto`` on ``sys.path``, after the standard library, when it is there, so
hangar's scripts import ``cryptography`` from hangar's folder and from nowhere else (it runs
Python ``-I -S``: no PYTHONPATH, no current folder, no site-packages). Exit 0, or 1 with the
reason on standard error. Idempotent; two at once are fine.

``cryptokit probe`` reads ``{"key": hex, "nonce": hex, "plain": hex, "aad": hex}`` on
standard input and answers, as one JSON line, whether this interpreter can seal with AES-GCM
through that folder: ``{"available": bool, "reason": str, "python": "3.11.2", "machine":
"x86_64", "version": "<cryptography's>", "sealed": hex}``. Available only when ``LIB/crypto``
is there, ``AESGCM`` imports from it, and the input seals (``sealed``: for the control plane to
compare with its own) and opens again; otherwise the reason says which step failed (not
installed; the import's error, such as a musl image's or a Python older than 3.9; another
``cryptography`` than hangar's; sealing failed). Exit 0 whatever the answer; 2 for input that
is not such an object.
"""

import json
import os
import platform
import re
import shutil
import sys
import tarfile
import tempfile
import zlib

LINK = "crypto"
NAME = re.compile(r"^crypto-[0-9a-f]{20}$")


def lib():
    """The folder holding the scripts' folder: LIB/<digest>/hangar/agent/cryptokit.py."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.dirname(os.path.dirname(os.path.dirname(here)))


def unpack(stream, into):
    """Unpack the gzipped tar on ``stream`` into ``into``: folders and regular files only,
    each under ``into`` (folders 0755, files 0644)."""
    with tarfile.open(fileobj=stream, mode="r|gz") as tar:
        for member in tar:
            parts = member.name.split("/")
            if member.name.startswith("/") or ".." in parts or not (member.isdir()
                                                                     or member.isfile()):
                raise ValueError("unexpected entry %r in the archive" % member.name)
            target = os.path.join(into, *parts)
            if member.isdir():
                os.makedirs(target, 0o755, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
            source = tar.extractfile(member)
            with open(target, "wb") as out:
                shutil.copyfileobj(source, out)
            os.chmod(target, 0o644)


def install(name):
    top = lib()
    final = os.path.join(top, name)
    if os.path.isdir(final):
        while sys.stdin.buffer.read(1 << 20):
            pass
    else:
        new = tempfile.mkdtemp(prefix="." + name + ".", dir=top)
        try:
            unpack(sys.stdin.buffer, new)
            os.chmod(new, 0o755)
            try:
                os.rename(new, final)
            except OSError:
                if not os.path.isdir(final):  # not another install's, finished first
                    raise
        finally:
            shutil.rmtree(new, ignore_errors=True)
    link = os.path.join(top, LINK)
    temporary = os.path.join(top, ".%s.%d" % (LINK, os.getpid()))
    if os.path.lexists(temporary):
        os.unlink(temporary)
    os.symlink(name, temporary)
    os.replace(temporary, link)


def probe(key, nonce, plain, aad):
    answer = {"available": False, "reason": "", "python": platform.python_version(),
              "machine": platform.machine(), "version": "", "sealed": ""}  # fmt: skip
    folder = os.path.join(lib(), LINK)
    if not os.path.isdir(folder):
        answer["reason"] = "hangar's cryptography is not installed in this sandbox"
        return answer
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        import cryptography
    except Exception as exc:  # any failure to import is the answer: ImportError, OSError...
        answer["reason"] = "cannot import cryptography's AESGCM with Python %s on %s: %s: %s" % (
            answer["python"], answer["machine"], type(exc).__name__, exc)
        return answer
    answer["version"] = getattr(cryptography, "__version__", "")
    where = os.path.realpath(getattr(cryptography, "__file__", None) or "")
    if not where.startswith(os.path.realpath(folder) + os.sep):
        answer["reason"] = "cryptography was imported from %s, not hangar's folder" % where
        return answer
    try:
        aead = AESGCM(key)
        sealed = aead.encrypt(nonce, plain, aad)
        opened = aead.decrypt(nonce, sealed, aad)
    except Exception as exc:  # a library that imports but cannot seal is unavailable too
        answer["reason"] = "AESGCM failed to seal: %s: %s" % (type(exc).__name__, exc)
        return answer
    if opened != plain:
        answer["reason"] = "AESGCM opened what it sealed to other bytes"
        return answer
    answer["available"], answer["sealed"] = True, sealed.hex()
    return answer


def main():
    args = sys.argv[1:]
    if args == ["probe"]:
        try:
            given = json.loads(sys.stdin.buffer.read())
            fields = [bytes.fromhex(given[k]) for k in ("key", "nonce", "plain", "aad")]
        except (KeyError, TypeError, ValueError) as exc:
            sys.stderr.write("cryptokit probe: bad input (%s)\n" % exc)
            sys.exit(2)
        sys.stdout.write(json.dumps(probe(*fields)) + "\n")
    elif len(args) == 2 and args[0] == "install" and NAME.match(args[1]):
        try:
            install(args[1])
        except (OSError, ValueError, tarfile.TarError, EOFError, zlib.error) as exc:
            sys.stderr.write("cryptokit: cannot install %s: %s\n" % (args[1], exc))
            sys.exit(1)
    else:
        sys.stderr.write("usage: cryptokit probe < JSON | cryptokit install crypto-DIGEST < TAR.GZ\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
