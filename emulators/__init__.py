"""Local stand-ins for the services hangar talks to, so tests and offline demos run the official
clients against real wire protocols.

``emulators.model`` is a scripted model-API stub (Anthropic Messages, OpenAI Responses and
Chat Completions) that the real Claude Code, Codex and pi CLIs talk to on 127.0.0.1; the cloud
ones are launchers for Google's Firestore emulator, fake-gcs-server and gcloud-tasks-emulator
and stand-ins for Cloud KMS and the Cloud Run Admin API, all started at once by
``emulators/run`` (:mod:`emulators.cloud`). See ``emulators/README.md``.
"""
