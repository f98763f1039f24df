#!/usr/bin/python3
"""A scripted stand-in for the Antigravity CLI (``agy``), which cannot be installed here.

It implements the interface hangar assumes (see hangar/harnesses/antigravity.py): ``agy -p
--output-format stream-json [--conversation ID] [--model M] -- PROMPT``; conversations in
``~/.gemini/antigravity-cli/conversations/<id>.db`` (SQLite); an ``init`` event first; an
unknown id silently starts a new conversation. Its reply says how much history it saw.
Test knobs: AGY_STANDIN_EXIT=N exits N after a message on stderr; AGY_STANDIN_NO_INIT=1 leaves
the init event out; AGY_STANDIN_HANG_ON=TEXT makes a prompt holding TEXT wait (a minute, saying
nothing) after its ``run:`` lines, before it is answered; a prompt line ``run: CMD`` runs CMD
with bash in the working folder (a tool call, as far as tests care); a line ``wait-for: PATH``
waits (up to a minute) until PATH exists.
hangar's ``<hangar-exchange>`` note is context, not part of the task, as the model stub reads it.
Without ``-p`` it is interactive (the terminal's agent mode), as far as tests care: it prints
its arguments, the conversation's message count, ``$HANGAR_IO`` and whether the environment's
``API_TOKEN`` secret came, then echoes lines until one is ``/exit`` (or input ends), exiting 0.
"""

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import uuid


def main() -> int:
    parser = argparse.ArgumentParser(prog="agy")
    parser.add_argument("-p", dest="print", action="store_true")
    parser.add_argument("--output-format", default="text")
    parser.add_argument("--conversation")
    parser.add_argument("--model")
    parser.add_argument("prompt", nargs="?")
    args = parser.parse_args()
    if args.print and args.prompt is None:
        parser.error("-p needs a prompt")
    if not args.print:
        args.prompt = None
    if os.environ.get("AGY_STANDIN_EXIT"):
        sys.stderr.write("agy: the model service refused the request\n")
        return int(os.environ["AGY_STANDIN_EXIT"])
    folder = os.path.expanduser("~/.gemini/antigravity-cli/conversations")
    os.makedirs(folder, exist_ok=True)
    if args.prompt is None:
        return interactive(folder, args.conversation)
    conversation = args.conversation
    if not conversation or not os.path.exists(os.path.join(folder, conversation + ".db")):
        conversation = str(uuid.uuid4())  # the real CLI does this silently too
    db = sqlite3.connect(os.path.join(folder, conversation + ".db"))
    db.execute("CREATE TABLE IF NOT EXISTS messages (role TEXT, text TEXT)")
    history = db.execute("SELECT role, text FROM messages ORDER BY rowid").fetchall()

    def emit(event: dict) -> None:
        sys.stdout.write(json.dumps(event) + "\n")

    if not os.environ.get("AGY_STANDIN_NO_INIT"):
        emit({"type": "init", "conversation_id": conversation, "model": args.model or "agy-1"})
    # hangar's note on $HANGAR_IO is context, not the task (as the model stub reads it)
    args.prompt = re.sub(r"\s*<hangar-exchange>.*?</hangar-exchange>", "", args.prompt, flags=re.S)
    for line in args.prompt.splitlines():
        if line.startswith("run: "):
            subprocess.run(["bash", "-c", line[5:]], check=False)
        elif line.startswith("wait-for: "):
            deadline = time.monotonic() + 60
            while not os.path.exists(line[10:]) and time.monotonic() < deadline:
                time.sleep(0.05)
    hang_on = os.environ.get("AGY_STANDIN_HANG_ON")
    if hang_on and hang_on in args.prompt:
        time.sleep(60)
    first = history[0][1] if history else args.prompt
    reply = "Seen %d earlier messages; the task began with: %s" % (len(history), first)
    db.executemany(
        "INSERT INTO messages VALUES (?, ?)", [("user", args.prompt), ("assistant", reply)]
    )
    db.commit()
    emit({"type": "message", "role": "assistant", "content": reply})
    emit({"type": "result", "result": reply, "usage": {"input_tokens": 10, "output_tokens": 5}})
    return 0


def interactive(folder: str, conversation: str) -> int:
    path = os.path.join(folder, (conversation or "none") + ".db")
    seen = 0
    if conversation and os.path.exists(path):
        seen = sqlite3.connect(path).execute("SELECT count(*) FROM messages").fetchone()[0]
    print("agy interactive argv=%s" % json.dumps(sys.argv[1:]))
    print("agy interactive seen=%d io=%s secret=%s" % (
        seen, os.environ.get("HANGAR_IO", "-"), "yes" if os.environ.get("API_TOKEN") else "no"))
    sys.stdout.flush()
    for line in sys.stdin:
        if line.strip() == "/exit":
            break
        print("agy heard: " + line.strip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
