"""Bridges between trivium and the outside: veRL command lines, upper-level tool configs
(key-mapping files) and checkpoint export to a plain Hugging Face model directory.

Everything here produces plain nested dicts, YAML text or files on disk; loading and
validating configs belongs to ``trivium.config``.
"""
