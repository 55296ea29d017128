"""Debugging a workflow outside a run: one task, a remotely served model, readable output."""
