"""Text environments: the rules of the games tasks are drawn from (``trivium init data``) and
multi-turn workflows play. The rules only: no model calls, no workflows, no datasets."""
