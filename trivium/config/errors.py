"""Configuration errors and suggestions.

A ``ConfigError`` collects every problem found in one pass, so a user fixes them all at once;
each problem names the key it is about and what to change. A ``Suggestion`` is advice that
never stops a valid run.
"""

from __future__ import annotations

from dataclasses import dataclass

from trivium.errors import UserError


@dataclass(frozen=True)
class Problem:
    key: str  # dotted path, e.g. "buffer.explorer_input.tasksets[0].path"; "" for the whole file
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}" if self.key else self.message


class ConfigError(UserError):
    """One or more problems in a configuration; ``str()`` lists them all."""

    def __init__(self, problems: list[Problem] | Problem | str, source: str | None = None):
        if isinstance(problems, (Problem, str)):
            problems = [problems if isinstance(problems, Problem) else Problem("", problems)]
        self.problems = list(problems)
        self.source = source
        super().__init__(self._format())

    def _format(self) -> str:
        where = f" in {self.source}" if self.source else ""
        if len(self.problems) == 1:
            return f"invalid configuration{where}: {self.problems[0]}"
        lines = [f"invalid configuration{where} ({len(self.problems)} problems):"]
        lines += [f"  - {problem}" for problem in self.problems]
        return "\n".join(lines)


@dataclass(frozen=True)
class Suggestion:
    """Advice about a valid configuration, or a note on a value resolve() derived."""

    key: str
    message: str
    kind: str = "suggestion"  # "suggestion" | "note" | "deprecated" | "unused"

    def __str__(self) -> str:
        return f"[{self.kind}] {self.key}: {self.message}"
