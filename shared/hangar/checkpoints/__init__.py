"""Checkpoints: taking them out of a sandbox, storing them sealed, restoring them into one.

- :mod:`.checkpointer` takes a checkpoint (the sandbox's script, :mod:`hangar.agent.checkpoint`),
  stores it and records it, pruning; :mod:`.restore` restores the newest that restores.
- :mod:`.parts` seals and stores a checkpoint's parts whole (format 1, and format 2's manifest).
- Format 2, content-addressed chunks: :mod:`.manifest` (what a checkpoint holds, and how that
  is stored), :mod:`.chunked` (what the sandbox sent, checked and stored), :mod:`.chunks`
  (chunks sealed one by one, in packs, and read back), :mod:`.sweep` (which packs are alive).
- :mod:`.contents` reads a recorded checkpoint's parts whatever its format, and
  :mod:`.rebuild` turns a format-2 tree back into the tar the restore script reads.
"""
