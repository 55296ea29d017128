"""Records that flow between explorer, buffer and trainer."""
