"""What the hardened sandbox means for sessions: the environment's setup keeps its secrets off
the host's process list, hangar's git runs nothing a repo's config names, restored work belongs
to the agent, and sandboxes of the previous layout are checkpointed and replaced."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hangar.models import CheckpointReason, Session, SessionState, TurnOutcome
from hangar.sandboxes import SandboxUser
from hangar.sessions.sandbox import SESSION_LABEL
from tests.legacy_sandbox import make_legacy_sandbox
from tests.unit.sessions.world import World, start

pytestmark = pytest.mark.sandbox

IDENTITY = {"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "A",
            "GIT_COMMITTER_EMAIL": "a@x"}  # fmt: skip


def cmdlines_holding(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if text.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_the_setup_secret_never_reaches_the_hosts_process_list_and_setup_runs_as_the_agent(
    world: World, remote: Path
) -> None:
    world.service.environments.add(
        "secretive", str(remote), vars=IDENTITY, secrets={"DEPLOY_KEY": "dk-5e1f0c2a"},
        setup='while [ ! -e /tmp/go ]; do sleep 0.05; done; echo "$DEPLOY_KEY $(id -u)" > ~/got',
    )  # fmt: skip
    started = world.service.new("quiet", "hi", "secretive", harness="antigravity")
    assert started.session.state is SessionState.STARTING  # answered before any of the work
    deadline = time.monotonic() + 60
    while not cmdlines_holding("while [ ! -e /tmp/go ]"):
        assert time.monotonic() < deadline, world.service.get("quiet").phase
        time.sleep(0.02)
    during = world.service.get("quiet")
    assert during.phase and during.phase.step.value == "running_setup"
    assert during.turns[0].started_at is None
    scans = [cmdlines_holding("dk-5e1f0c2a") for _ in range(20)]  # while setup runs
    assert during.sandbox_id
    world.sandboxes.exec(during.sandbox_id, ["touch", "/tmp/go"])
    turn = world.service.wait("quiet", timeout=60, poll=0.05)
    assert turn.outcome is TurnOutcome.EXITED and turn.started_at is not None
    assert scans == [[]] * 20
    assert world.sh("quiet", "cat ~/got") == "dk-5e1f0c2a 1000\n"


# Every git setting that can make git run a program, each pointing at /root/mark, which logs
# its name, and in both the repo's config and the agent's global one.
PLANT = r"""
set -e
cat > /root/mark <<'EOF'
#!/bin/sh
echo "$(basename "$0") $* uid=$(id -u)" >> /tmp/planted
cat
EOF
chmod 755 /root/mark
mkdir -p /root/hooks .git/hooks
for hook in pre-commit post-checkout post-merge post-rewrite reference-transaction \
            post-index-change pre-auto-gc fsmonitor-watchman pre-push; do
    ln -sf /root/mark /root/hooks/$hook
    ln -sf /root/mark .git/hooks/$hook
done
for scope in --local --global; do
    git config $scope core.hooksPath /root/hooks
    git config $scope core.fsmonitor /root/mark
    git config $scope filter.evil.clean /root/mark
    git config $scope filter.evil.smudge /root/mark
    git config $scope filter.evil.process /root/mark
    git config $scope filter.evil.required true
    git config $scope diff.evil.textconv /root/mark
    git config $scope diff.evil.command /root/mark
    git config $scope diff.external /root/mark
    git config $scope merge.evil.driver /root/mark
    git config $scope core.sshCommand /root/mark
    git config $scope core.pager /root/mark
    git config $scope core.editor /root/mark
    git config $scope core.askPass /root/mark
    git config $scope credential.helper '!/root/mark'
    git config $scope gpg.program /root/mark
    git config $scope core.alternateRefsCommand /root/mark
done
echo '* filter=evil diff=evil merge=evil' > .git/info/attributes
echo '* filter=evil diff=evil merge=evil' > .gitattributes
"""


def planted(world: World, ref: str) -> str:
    session = world.service.resolve(ref)
    assert session.sandbox_id
    result = world.sandboxes.exec(session.sandbox_id, ["sh", "-c", "cat /tmp/planted; rm -f "
                                  "/tmp/planted; true"], user=SandboxUser.HANGAR)  # fmt: skip
    return result.stdout.decode()


def test_no_program_a_repo_names_runs_during_a_checkpoint_a_patch_or_a_restore(
    world: World, remote: Path
) -> None:
    world.service.environments.add("planted", str(remote), vars=IDENTITY, setup=PLANT)
    world.service.new("trap", "run: echo changed >> README.md && echo new > new.txt", "planted",
                      harness="antigravity")  # fmt: skip
    world.service.wait("trap", timeout=60, poll=0.05)
    planted(world, "trap")  # whatever the turn's own git ran
    # The plant is live: the agent's own git runs it.
    world.sh("trap", "git diff >/dev/null; git status >/dev/null; true")
    assert "mark" in planted(world, "trap")
    world.service.checkpointer.take(
        _target(world, "trap"), CheckpointReason.MANUAL
    )  # fmt: skip
    assert world.service.patch("trap")
    assert planted(world, "trap") == ""
    world.service.suspend("trap")
    world.open("trap")  # a new sandbox: setup plants again, then the restore runs
    assert world.sh("trap", "cat new.txt; tail -1 README.md") == "new\nchanged\n"
    assert planted(world, "trap") == ""


def _target(world: World, ref: str):  # type: ignore[no-untyped-def]
    from hangar.sessions.sandbox import checkpoint_target

    return checkpoint_target(world.service.resolve(ref))


def test_after_a_restore_the_agent_owns_and_can_append_to_every_restored_file(
    world: World,
) -> None:
    start(world, message="run: mkdir -p deep/er && echo a > deep/er/one.txt && chmod 600 "
          "deep/er/one.txt && echo b > tracked.txt && git add tracked.txt && git commit -qm t && "
          "echo c >> tracked.txt && chmod 700 deep")  # fmt: skip
    world.sh("demo", "mkdir -p ~/.gemini/antigravity-cli/conversations/sub && "
             "echo x > ~/.gemini/antigravity-cli/conversations/sub/note && "
             "chmod 600 ~/.gemini/antigravity-cli/conversations/sub/note")  # fmt: skip
    world.service.suspend("demo")
    world.open("demo")
    folders = "/workspace/app /root/.gemini"
    assert world.sh("demo", f"find {folders} ! -user agent ! -type l") == ""
    appended = world.sh("demo", f"find {folders} -path '*/.git' -prune -o -type f -perm -u=w "
                        "-print | while read -r f; do echo appended >> \"$f\" || "
                        'echo "FAILED $f"; done; echo done')  # fmt: skip
    assert appended == "done\n"
    # git works for the agent in the restored repo (its index and objects are the agent's).
    assert world.sh("demo", "git add -A && git -c user.name=a -c user.email=a@x commit -qm mine "
                    "&& git status --porcelain") == ""


def test_a_sandbox_of_the_previous_layout_is_checkpointed_and_replaced(
    world: World, remote: Path
) -> None:
    session = world.db.create_session(
        Session(name="old", environment="app", harness="antigravity", repo=str(remote))
    )
    legacy = make_legacy_sandbox(world.sandboxes.root, {SESSION_LABEL: session.id}, [str(remote)])
    [info] = world.sandboxes.list()
    assert info.id == legacy and info.outdated
    script = (f"git clone -q {remote} /workspace/app && cd /workspace/app && "
              "git checkout -qb hangar/session/old && echo kept > untracked.txt && "
              "echo more >> README.md && git rev-parse HEAD")  # fmt: skip
    made = world.sandboxes.exec(legacy, ["bash", "-c", script], env=IDENTITY)
    assert made.ok, made
    base = made.stdout.decode().strip()
    world.service._records.update(session.id, state=SessionState.IDLE, sandbox_id=legacy,
                                  base_commit=base)  # fmt: skip

    assert world.service.replace_outdated_sandboxes() == [legacy]
    after = world.service.get("old")
    assert after.state is SessionState.SUSPENDED and after.sandbox_id is None
    assert [c.reason for c in after.checkpoints] == [CheckpointReason.DESTROY]
    assert world.sandboxes.list() == []
    world.open("old")
    [current] = world.sandboxes.list()
    assert not current.outdated
    assert world.sh("old", "cat untracked.txt; tail -1 README.md; stat -c %U untracked.txt") == (
        "kept\nmore\nagent\n"
    )
