"""Local stand-ins for the services hangar talks to, so tests and offline demos run the official
clients against real wire protocols.

``emulators.model`` is a scripted model-API stub (Anthropic Messages, OpenAI Responses and
Chat Completions) that the real Claude Code, Codex and pi CLIs talk to on 127.0.0.1. The cloud
emulators arrive with the cloud work.
"""
