"""Serve mode: the policy served to outside agent applications, trained on their rewarded sessions.

``trivium.serve.Client`` talks to a running ``mode: serve`` run; ``trivium.serve.loop`` is the
mode's loop and ``trivium.serve.sessions`` records the sessions. See docs/serve.md.
"""

from trivium.serve.client import Client, ServeError

__all__ = ["Client", "ServeError"]
