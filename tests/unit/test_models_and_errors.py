from __future__ import annotations

import re

from hangar import errors
from hangar.models import Checkpoint, CheckpointReason, Session, SessionState


def test_a_new_session_gets_an_id_a_work_branch_and_the_starting_state() -> None:
    session = Session(name="csv-fix", environment="app", harness="claude")
    assert re.fullmatch(r"ses-[0-9a-f]{8}", session.id)
    assert session.branch == "hangar/session/csv-fix"
    assert session.state is SessionState.STARTING
    assert session.idle_minutes == 30
    assert session.created_at.tzinfo is not None


def test_a_checkpoint_round_trips_through_json() -> None:
    checkpoint = Checkpoint(
        session_id="ses-1", reason=CheckpointReason.TURN, head="a" * 40, wrapped_key="k"
    )
    again = Checkpoint.model_validate_json(checkpoint.model_dump_json())
    assert again == checkpoint


def test_every_error_code_is_unique_and_every_error_descends_from_the_root() -> None:
    classes = [
        c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)
    ]
    assert all(issubclass(c, errors.HangarError) for c in classes)
    codes = [c.code for c in classes]
    assert len(codes) == len(set(codes))


def test_an_error_serialises_to_the_wire_shape() -> None:
    exc = errors.SessionNotFound("no session 'x'", ref="x")
    assert exc.status == 404
    assert exc.to_dict() == {
        "error": {"code": "session_not_found", "message": "no session 'x'", "ref": "x"}
    }


def test_the_error_tree_in_the_docstring_names_every_error_with_its_parent_code_and_status() -> None:
    drawn: dict[str, tuple[str, str, int]] = {}
    parents: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        match = re.match(r"^    ((?:[│ ]   )*)(?:[├└]── )?(\w+)\s+(\w+)\s+(\d{3})$", line)
        if not match:
            continue
        depth = len(match.group(1)) // 4 + (1 if "──" in line else 0)
        del parents[depth:]
        drawn[match.group(2)] = (parents[-1] if parents else "", match.group(3),
                                 int(match.group(4)))  # fmt: skip
        parents.append(match.group(2))
    classes = {name: c for name, c in vars(errors).items()
               if isinstance(c, type) and issubclass(c, errors.HangarError)}  # fmt: skip
    assert set(drawn) == set(classes)
    for name, c in classes.items():
        parent = "" if c is errors.HangarError else c.__mro__[1].__name__
        assert drawn[name] == (parent, c.code, c.status), name
