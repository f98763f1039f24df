"""The pseudo terminal a terminal's program runs in, inside the sandbox: the words that set it
up, its size, and the commands that resize it and clean up after it.

The program runs under ``script`` (util-linux), which makes the pseudo terminal. Its first
words set ``TERM`` and the size, then write the terminal's device path (``tty``) to a file in
the sandbox's own ``/tmp``, named by the server: a resize is ``stty -F`` on that device, run
in the sandbox as the agent (the agent could rewrite that file; it only ever names one of the
agent's own terminals, and it is passed as one quoted word). Everything here goes on a command
line inside the sandbox: never a secret.
"""

from __future__ import annotations

import re
import secrets
import shlex

from hangar.errors import InvalidInput

MAX_SIZE = 1000
"""The most rows, or columns, a terminal gets; larger sizes are taken as this."""
_TERM = re.compile(r"[A-Za-z0-9._+-]{1,64}")
_NUMBER = re.compile(r"[0-9]+")
_WAIT_FOR_DEVICE = 100  # tries 20 ms apart: a resize right after the start waits for the file


def tty_file() -> str:
    """A new name for a terminal's device file, in the sandbox's ``/tmp``."""
    return f"/tmp/hangar-tty-{secrets.token_hex(8)}"


def clamp(n: int) -> int:
    """A size within 1 to :data:`MAX_SIZE`."""
    return max(1, min(n, MAX_SIZE))


def size_of(rows: str | None, cols: str | None) -> tuple[int, int] | None:
    """The ``rows`` and ``cols`` query parameters as a size (None when either is missing or
    0: the size is left alone); InvalidInput (naming the field) for one that is not a plain
    number. Sizes above :data:`MAX_SIZE` are taken as it."""
    numbers = []
    for name, value in (("rows", rows), ("cols", cols)):
        if value and not _NUMBER.fullmatch(value):
            raise InvalidInput(f"{name} must be a number (of rows or columns), not "
                               f"{value[:20]!r}", field=name)  # fmt: skip
        numbers.append(int(value) if value and len(value) <= 6 else MAX_SIZE if value else 0)
    if 0 in numbers:
        return None
    return clamp(numbers[0]), clamp(numbers[1])


def setup(term: str | None, size: tuple[int, int] | None, device_file: str) -> str:
    """The shell words that start a terminal: TERM, the size, then the device's path written
    to ``device_file`` (after the size, so a resize that waits for the file is never undone);
    InvalidInput for a TERM that is not a plain terminal type."""
    term = term or "xterm-256color"
    if not _TERM.fullmatch(term):
        raise InvalidInput(f"term {term!r} is not a terminal type", field="term")
    words = f"export TERM={term}; "
    if size is not None:
        words += f"stty rows {size[0]} cols {size[1]} 2>/dev/null; "
    return words + f"tty > {device_file} 2>/dev/null; "


def under_script(command: list[str], words: str) -> list[str]:
    """``command`` under ``script``, in a pseudo terminal started by ``words`` (:func:`setup`)."""
    # -e: script exits with the command's status; -f: output is flushed as it comes.
    return ["script", "-qefc", words + "exec " + shlex.join(command), "/dev/null"]


def resize(device_file: str, rows: int, cols: int) -> list[str]:
    """The command that gives the terminal whose device path is in ``device_file`` this size
    (clamped); it waits up to two seconds for the file, which a terminal writes as it starts."""
    script = (f'i=0; while [ ! -s "$1" ]; do [ $i -lt {_WAIT_FOR_DEVICE} ] || exit 3; '
              'i=$((i+1)); sleep 0.02; done; stty -F "$(cat "$1")" rows "$2" cols "$3"')  # fmt: skip
    return ["sh", "-c", script, "sh", device_file, str(clamp(rows)), str(clamp(cols))]


def forget(device_file: str) -> list[str]:
    """The command that removes a terminal's device file once it has ended."""
    return ["rm", "-f", device_file]
