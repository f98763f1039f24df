"""A start whose sandbox goes away between its steps makes another and finishes: no step asks
first whether the sandbox exists (a request per step on a cluster), the step that finds it
gone goes back to making one."""

from __future__ import annotations

from hangar.models import SessionState, StartStep
from tests.unit.sessions.world import AUTO_KINDS, World, start


def test_a_sandbox_gone_while_its_start_clones_is_made_again_and_the_session_resumes(
    world: World,
) -> None:
    start(world)
    world.service.suspend("demo")
    world.ticks.auto = frozenset({"claim", "watch"})  # the start's ticks are delivered by hand
    world.service.open("demo")
    [key] = [k for k in world.ticks.due if k.startswith("start:")]

    world.tick(key)  # creating_sandbox: made, ready, its clone started
    cloning = world.service.resolve("demo")
    assert cloning.phase is not None and cloning.phase.step is StartStep.CLONING
    assert cloning.sandbox_id is not None
    world.sandboxes.destroy(cloning.sandbox_id)

    world.tick(key)  # cloning: the sandbox is gone
    again = world.service.resolve("demo")
    assert again.state is SessionState.STARTING and again.sandbox_id is None
    assert again.phase is not None and again.phase.step is StartStep.CREATING_SANDBOX

    world.ticks.auto = AUTO_KINDS
    done = world.settle("demo")
    assert done.state is SessionState.IDLE, done.start_error
    assert done.sandbox_id not in (None, cloning.sandbox_id)
    assert world.sh("demo", "cat notes.txt") == "note\n"
