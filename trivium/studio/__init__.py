"""The Studio: a local web app to build a config, start a run, and watch it learn.

``trivium studio`` serves it (``trivium.cli.studio``). The app (``app.create_app``) reads
run directories and buffers, never writes into them, except when it starts a run (its
config and console output go to ``<run dir>/studio/``). Modules, one job each:

* ``runs``: the run directories under a root, with status, mode, stages and progress;
* ``metrics``: the curves of a run from ``metrics.jsonl`` (the plot list of ``monitor.plots``);
* ``experiences``: a run's buffered experiences, token by token;
* ``config_form``: the config builder's fields (from the schema) and its live checks;
* ``launch``: starting ``trivium run`` as a subprocess and following it;
* ``app``: the FastAPI routes and pages.
"""
