"""A scripted model-API stub that the real Claude Code, Codex and pi CLIs talk to offline.

It serves Anthropic Messages, OpenAI Responses and OpenAI Chat Completions on 127.0.0.1, picks
each response from a scenario using only the request itself (so resumes, retries and restarts
behave), and logs every request body so tests can assert what context an agent sent::

    from emulators.model import ModelStub

    with ModelStub({"rules": [{"when": "write", "steps": [{"shell": "echo hi > a.txt"},
                                                            {"text": "Wrote a.txt."}]}]}) as stub:
        ...  # point a CLI at stub.url
        first, second = stub.requests("anthropic")[:2]
        assert "hi" in ModelStub.transcript(second["body"])

Standard library only. See ``emulators/README.md`` for the scenario format and how to point each
CLI at the stub.
"""

from .scenario import Entry, Scenario, ScenarioError, Step
from .server import ModelStub

__all__ = ["Entry", "ModelStub", "Scenario", "ScenarioError", "Step"]
