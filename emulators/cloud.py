"""Every cloud emulator at once: the Firestore emulator, fake-gcs-server behind our verifying
front, the Cloud Tasks emulator, the KMS stand-in and the IAM Credentials stand-in, each on a free
127.0.0.1 port, and the environment that points hangar at them (sandboxes stay local).

hangar signs URLs as :data:`SIGNER` through the IAM stand-in's ``signBlob`` (as on Cloud Run,
where there is no private key), and the front's signed port trusts that account's key: it is
the endpoint of those URLs, and the one port a stand-in pod may be given.

Used by ``emulators/run -- CMD`` and by the tests that run hangar whole on the cloud backends.
"""

from __future__ import annotations

import concurrent.futures
from typing import Self

from emulators.firestore import FirestoreEmulator
from emulators.gcs import FakeGcs
from emulators.iam import IamStandIn
from emulators.kms import KmsStandIn
from emulators.processes import Emulator
from emulators.tasks import TasksEmulator

PROJECT = "hangar-local"
LOCATION = "us-central1"
BUCKET = "hangar-local"
QUEUE = "hangar-ticks"
SIGNER = "hangar-control@{project}.iam.gserviceaccount.com"
"""The service account hangar signs URLs as (the project filled in)."""


class CloudEmulators(Emulator):
    """Starts the four emulators together (concurrently: the Firestore emulator alone takes
    seconds), makes the bucket and the queue, and stops them all at the end of the ``with``
    block. :meth:`environment` gives the variables for hangar."""

    def __init__(self, project: str = PROJECT) -> None:
        self.project = project
        self.firestore = FirestoreEmulator()
        self.gcs = FakeGcs(front=True)
        self.tasks = TasksEmulator()
        self.kms = KmsStandIn()
        self.iam = IamStandIn()
        self.signer = SIGNER.format(project=project)
        self.queue = f"projects/{project}/locations/{LOCATION}/queues/{QUEUE}"
        self._started: list[Emulator] = []

    def start(self) -> Self:
        emulators: list[Emulator] = [self.firestore, self.gcs, self.tasks, self.kms, self.iam]
        with concurrent.futures.ThreadPoolExecutor(len(emulators)) as pool:
            futures = {pool.submit(e.start): e for e in emulators}
            errors: list[BaseException] = []
            for future in concurrent.futures.as_completed(futures):
                if (error := future.exception()) is None:
                    self._started.append(futures[future])
                else:
                    errors.append(error)
        if errors:
            self.stop()
            raise errors[0]
        self.gcs.create_bucket(BUCKET, self.project)
        self.gcs.trust(self.signer, self.iam.add_account(self.signer).public_key_pem)
        self.tasks.create_queue(self.queue)
        return self

    def stop(self) -> None:
        while self._started:
            self._started.pop().stop()

    def own_queue(self, name: str) -> str:
        """Make the queue ``name`` (letters, digits and hyphens) and return its full name, for
        one user's ticks apart from everyone else's: the emulator works each queue in a thread
        of its own, and its pass over a queue costs time quadratic in the tasks it holds, so a
        queue shared by many short-lived users slows every delivery down. Drop it with
        ``tasks.delete_queue`` once done (its pending deliveries stop)."""
        queue = f"projects/{self.project}/locations/{LOCATION}/queues/{name}"
        self.tasks.create_queue(queue)
        return queue

    def environment(self, namespace: str = "", queue: str | None = None) -> dict[str, str]:
        """The variables that point hangar (and the Google clients) at the emulators.
        ``namespace`` keeps one user's data apart from another's on the same emulators (its
        own Firestore prefix, blob prefix and KMS key); empty: the defaults. ``queue`` (from
        :meth:`own_queue`) takes the ticks instead of the shared queue."""
        suffix = f"/{namespace}" if namespace else ""
        key = namespace or "checkpoints"
        return {
            **self.firestore.environment(),
            **self.gcs.environment(),
            **self.tasks.environment(),
            "HANGAR_KMS_ENDPOINT": self.kms.url,
            "GOOGLE_CLOUD_PROJECT": self.project,
            "HANGAR_DB": f"firestore://{self.project}/(default){suffix}",
            "HANGAR_SESSION_STORE": f"gs://{BUCKET}/sessions{suffix}",
            "HANGAR_KEYS": f"gcpkms://projects/{self.project}/locations/global/keyRings/hangar"
            f"/cryptoKeys/{key}",
            "HANGAR_TICKS": f"cloudtasks://{queue or self.queue}",
            **self.signing_environment(),
        }

    def signing_environment(self) -> dict[str, str]:
        """The variables that have hangar sign URLs through the IAM stand-in, for the front's
        signed port."""
        return {
            "HANGAR_SIGNING_SERVICE_ACCOUNT": self.signer,
            "HANGAR_IAM_ENDPOINT": self.iam.url,
            "HANGAR_SIGNED_URL_ENDPOINT": self.gcs.signed_url,
        }

