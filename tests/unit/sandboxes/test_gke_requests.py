"""What a resume on ``gke://`` sandboxes asks of the Kubernetes API (counted on the stand-in,
where a real cluster's cost shows as requests, not time): the bench's measure, run once, held
to the issue's bound. No time is asserted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.bench import gke

pytestmark = pytest.mark.sandbox


@pytest.fixture(autouse=True)
def _needs_bubblewrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap (bwrap) is not installed: the stand-in's pods need it",
                    pytrace=False)  # fmt: skip


def test_a_warm_resume_takes_a_pooled_pod_and_asks_at_most_eight_requests_before_restoring(
    tmp_path: Path,
) -> None:
    line = gke.measure(True, 2, tmp_path)
    assert line["pods_created"] == 0
    assert max(line["requests_samples"]) <= gke.WARM_BOUND, line


def test_a_cold_resume_makes_its_pod_and_still_restores_the_session(tmp_path: Path) -> None:
    line = gke.measure(False, 1, tmp_path)
    assert line["pods_created"] == 1
    assert line["api_requests_total"] > line["api_requests"] > 0
