"""A placement in a module of its own: the process placement, recording what it built.

A run names it by its dotted path, which the placement registry resolves
(``cluster.placement: recording_placement:RecordingPlacement`` with this directory as
``--plugin-dir``); nothing in trivium changes for it. It writes ``placement_record.json``
into the run directory when it shuts down.
"""

import json

from trivium.runtime.local_placement import LocalPlacement

RECORD_FILE = "placement_record.json"


class RecordingPlacement(LocalPlacement):
    def __init__(self, settings):
        super().__init__(settings)
        self.record = {"built": [], "transport": None, "placed": False}

    def trainer(self, resume_step, transport):
        side = super().trainer(resume_step, transport)
        self.record["built"].append(type(side).__name__)
        self.record["transport"] = transport.name
        return side

    def explorer(self):
        side = super().explorer()
        self.record["built"].append(type(side).__name__)
        self.record["engines"] = len(side.engines)
        return side

    def placed(self):
        self.record["placed"] = True

    def shutdown(self):
        (self.settings.run_dir / RECORD_FILE).write_text(json.dumps(self.record))
