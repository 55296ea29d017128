"""``trivium serve-tinker``: the Tinker training API served by trivium on this machine.

Recipes written for the Tinker API (its official Python SDK pointed at this server with
``ServiceClient(base_url=...)``) train and sample local models here. The package keeps the
math apart from the plumbing:

* ``losses``: the loss functions the server computes (``cross_entropy``, ``importance_sampling``);
* ``wire``: the SDK's request and response encodings (JSON, and the protobuf messages of
  forward/backward and sampling), turned into plain Python and numpy values;
* ``policy_model``: one model to train or sample (LoRA through peft, or full weights), its
  optimizer, and its checkpoints on disk;
* ``sampling``: token generation with per-token logprobs and stop conditions;
* ``checkpoints``: the ``tinker://`` paths and the directories they name;
* ``jobs``: the futures the SDK polls, run one at a time by a worker thread;
* ``request_checks``: what a training request must hold, refused before any work is queued;
* ``forward_backward``: one forward/backward call over its datums and the per-datum outputs;
* ``state``: sessions, training models and samplers, and each operation the routes call;
* ``app``: the FastAPI routes, the API key and the request size bound; ``server``: running it.
"""
