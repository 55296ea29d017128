"""Text environments the built-in multi-turn workflows play: the rules only, no model calls."""
