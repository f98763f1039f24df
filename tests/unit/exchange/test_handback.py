"""What a turn hands back is parsed as untrusted input, and schemas are checked before use."""

from __future__ import annotations

import json

import pytest

from hangar.errors import InvalidSchema
from hangar.exchange.handback import parse
from hangar.exchange.progress import parse_line
from hangar.exchange.schemas import check_schema, validate


def answer(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_garbage_from_the_sandbox_is_a_warning_not_an_error() -> None:
    for raw in (b"", b"not json", b"[]", answer(artifacts="lots")):
        handback = parse(raw)
        assert handback.summary is None and handback.artifacts == []
        assert len(handback.warnings) == 1 and "made no sense" in handback.warnings[0]


def test_question_options_are_capped_cut_and_redacted() -> None:
    options = ["Keep", "x" * 100, "use sk-ant-api03-abcdefghijklmnopqrstuv", "d", "e", "six"]
    handback = parse(answer(question="Which one?\n",
                            question_json=json.dumps({"question": "q", "options": options})))  # fmt: skip
    assert handback.question == "Which one?"
    assert handback.options[:2] == ["Keep", "x" * 80] and len(handback.options) == 5
    assert "sk-ant" not in handback.options[2] and "[redacted]" in handback.options[2]
    assert any("at most 5 options" in w for w in handback.warnings)


def test_options_without_a_question_are_dropped_and_bad_options_warned() -> None:
    assert parse(answer(question_json=json.dumps({"options": ["a"]}))).options == []
    bad = parse(answer(question="q", question_json="{nope"))
    assert bad.options == [] and "not JSON" in bad.warnings[0]
    mixed = parse(answer(question="q", question_json=json.dumps({"options": ["a", 3]})))
    assert mixed.options == [] and "no list of options" in mixed.warnings[0]


def test_a_result_is_parsed_only_when_present_and_within_the_cap() -> None:
    ok = parse(answer(result={"present": True, "size": 8, "text": '{"a": 1}'}))
    assert ok.result(1024) == ({"a": 1}, None)
    assert parse(answer()).result(1024) == (None, "no out/result.json was handed back")
    big = parse(answer(result={"present": True, "size": 5000, "too_large": True}))
    assert big.result(1024) == (None, "out/result.json is over 1 KiB")
    broken = parse(answer(result={"present": True, "size": 3, "text": "{x"}))
    value, why = broken.result(1024)
    assert value is None and why is not None and why.startswith("out/result.json is not JSON")


def test_progress_lines_keep_only_a_message_and_a_pct_from_0_to_100() -> None:
    assert parse_line('{"message": "tests", "pct": 40}') == parse_line('{"message":"tests","pct":40.0}')
    line = parse_line('{"message": "  two\\n lines ", "pct": 140}')
    assert line is not None and (line.message, line.pct) == ("two lines", None)
    assert parse_line('{"pct": 5}') is None and parse_line("[1]") is None
    assert parse_line("not json") is None and parse_line('{"message": true}') is None
    assert parse_line('{"message": "x", "pct": true}').pct is None  # type: ignore[union-attr]


def test_a_schema_is_checked_against_its_meta_schema_and_results_against_it() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert check_schema(schema) is schema
    for bad in ({"type": "nope"}, [], "x", {"properties": {"n": {"minimum": "low"}}}):
        with pytest.raises(InvalidSchema):
            check_schema(bad)
    assert validate({"n": 1}, schema) is None
    assert validate({"n": "one"}, schema) == "'one' is not of type 'integer' (at n)"
    assert validate({}, schema) == "'n' is a required property"
