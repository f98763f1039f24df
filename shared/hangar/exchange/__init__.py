"""The context exchange (spec 004), the agent's side: what a turn hands back and how it is read.

Every turn gets ``$HANGAR_IO``, the session's exchange folder in the agent's HOME
(:mod:`.layout`), and the ``hangar-agent`` helper on its PATH. After the turn, hangar reads
what the agent left there (:mod:`.handback`): the summary, the structured result (checked
against the turn's JSON Schema, :mod:`.schemas`), a question, progress lines
(:mod:`.progress`) and artifacts, stored sealed per turn (:mod:`.artifacts`). Everything read
from the folder is untrusted input: an in-sandbox script of hangar's reads it without following
links and within caps, and this package parses its answer defensively.
"""


def is_text(data: bytes) -> bool:
    """Whether ``data`` reads as UTF-8 text (no NUL byte): what is redacted and shown inline,
    and what the CLI sends as text rather than base64."""
    if b"\0" in data:
        return False
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
