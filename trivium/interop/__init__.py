"""Bridges between trivium and the outside: veRL command lines and checkpoint export to a
plain Hugging Face model directory. (Upper-level tool configs are read through key-mapping
files by the loader: ``trivium.config.key_mapping``.)

Everything here produces plain nested dicts, YAML text or files on disk; loading and
validating configs belongs to ``trivium.config``.
"""
