"""hangar: a control plane for cloud coding agents whose work survives the sandbox.

The package imports nothing heavy at import time; each area opens its backend from a URL in
:class:`hangar.config.Settings` when asked.
"""

__version__ = "0.1.0"
