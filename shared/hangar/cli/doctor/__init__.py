"""``hangar doctor``: configuration checks, one line each: ``OK``, ``INFO``, ``WARN`` or
``FAIL``, then what was checked. Exits 1 if any check failed; warnings do not fail.

In order:

1. the settings parse; the data folder (:mod:`.machine`);
2. with local sandboxes, this machine's tools and harness CLIs (on GKE they are the sandbox
   image's business), and the isolation a probe sandbox gets here (:mod:`.isolation`);
3. how the backends are combined, and one bounded probe per backend: db, blobs, keys, ticks
   (:mod:`.backends`);
4. on GKE (``gke://``), the cluster: it answers, the Agent Sandbox kinds are served, hangar's
   identity may do what the backend does, the prebuilt environments' pools are ready
   (:mod:`.cluster`);
5. the deployed Cloud Run functions, when the settings name any cloud backend
   (:mod:`.functions`);
6. the server at ``HANGAR_URL``: does it answer, does it take the token, do its environments
   name loopback ports their sandboxes cannot reach.

Every probe has a short timeout (``timeout`` seconds each), and a backend that cannot be reached
is a FAIL naming its setting, never a traceback. The Google client libraries are imported only
by the checks that use them. Nothing is printed that is secret (tokens, key material).
"""

from __future__ import annotations

from collections.abc import Mapping

from hangar.cli.doctor import backends, cluster, functions, isolation, machine
from hangar.cli.doctor.report import PROBE_SECONDS, Report
from hangar.config import Settings
from hangar.errors import HangarError

__all__ = ["PROBE_SECONDS", "doctor"]


def doctor(env: Mapping[str, str], *, timeout: float = PROBE_SECONDS) -> int:
    """Run every check against the settings in ``env``; prints the report, returns 0 or 1."""
    report = Report()
    try:
        settings = Settings.from_env(env)
    except HangarError as exc:
        report.line("FAIL", f"settings: {exc.message}")
        return 1
    report.line("OK", f"settings parse (data dir {settings.data_dir}, server {settings.url})")
    machine.data_dir(report, settings.data_dir)
    if settings.sandboxes.startswith("local:"):
        machine.sandbox_tools(report)
        machine.harnesses(report, settings.harness_dir)
        isolation.isolation(report, settings)
    else:
        report.line("INFO", f"sandboxes (HANGAR_SANDBOXES {settings.sandboxes}): the harness "
                    "CLIs and tools come with the sandbox image, not this machine")  # fmt: skip
    backends.configuration(report, settings)
    backends.reachability(report, settings, env, timeout)
    if settings.sandboxes.startswith("gke:"):
        cluster.cluster(report, settings, timeout)
    functions.check_functions(report, settings, env, timeout)
    machine.server(report, settings, timeout)
    return 1 if report.failed else 0
