"""Serve mode: the policy served to outside agent applications, trained on their rewarded sessions.

``trivium.serve.Client`` talks to a running ``mode: serve`` run; ``trivium.serve.loop`` is the
mode's loop, registered in the runtime's mode loops. The rollout engines are served as one pool
(``engine_pool``: routing and rotation; ``weight_roll``: new weights in turns; ``engine_health``:
health checks). The sessions it records are the model server's
(``trivium.models.served_sessions``); its config rules are ``trivium.config.serve_rules``.
See docs/serve.md.
"""

from trivium.serve.client import Client, ServeError

__all__ = ["Client", "ServeError"]
