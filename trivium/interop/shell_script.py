"""Find the veRL training command in a shell script and return its arguments.

This is a small subset of POSIX shell, enough for the launch scripts people keep next to
veRL: line continuations, comments, single and double quotes, ``name=value`` assignments
and ``$name`` / ``${name}`` / ``${name:-default}`` expansion. A variable the script assigns
is expanded in place; any other variable is read from the environment at run time, so it
becomes ``${oc.env:NAME}`` in the config. Nothing is executed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trivium.errors import UserError

ENTRY_POINT_MODULE = "verl.trainer.main_ppo"
_ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words that end one command and start the next.
_OPERATORS = (";;", "&&", "||", ";", "&", "|")


@dataclass
class ExtractedCommand:
    """The ``key=value`` words given to the veRL entry point, and what was noticed on the way."""

    arguments: list[str]
    notes: list[str] = field(default_factory=list)
    # Hydra options such as --config-name, which select a different base config.
    ignored_options: list[str] = field(default_factory=list)


def environment_reference(name: str, default: str | None = None) -> str:
    """How a run-time environment variable is written in a trivium config."""
    return f"${{oc.env:{name},{default}}}" if default is not None else f"${{oc.env:{name}}}"


class _Expander:
    """Expands ``$...`` references, remembering what it could not resolve for the notes."""

    def __init__(self, variables: dict[str, str], notes: list[str]):
        self.variables = variables
        self.notes = notes

    def expand(self, text: str, start: int) -> tuple[str, int]:
        """Expand the reference starting at ``text[start] == '$'``; returns (value, next index)."""
        rest = text[start + 1 :]
        if rest.startswith("{"):
            end = rest.find("}")
            if end < 0:
                raise UserError(f"unclosed '${{' in: {text.strip()}")
            inner = rest[1:end]
            name, _, default = inner.partition(":-")
            if not _NAME.fullmatch(name):
                return self._special(name, "${" + inner + "}"), start + end + 2
            return self._lookup(name, default if ":-" in inner else None), start + end + 2
        if rest.startswith("("):
            self._note("command substitution $(...) cannot be evaluated and is kept as text")
            return "$", start + 1
        if rest[:1] in ("@", "*", "#", "?", "!", "$", "-") or rest[:1].isdigit():
            return self._special(rest[:1], "$" + rest[:1]), start + 2
        match = _NAME.match(rest)
        if not match:
            return "$", start + 1
        return self._lookup(match.group()), start + 1 + match.end()

    def _lookup(self, name: str, default: str | None = None) -> str:
        if name in self.variables:
            return self.variables[name]
        self._note(f"${name} is not set in the script; it is read from the environment at run time")
        return environment_reference(name, default)

    def _special(self, name: str, written: str) -> str:
        if name in ("@", "*"):
            self._note(
                f"{written} (extra arguments given to the script) is unknown here and was left out; "
                "add such arguments to the converted config by hand"
            )
        else:
            self._note(f"the shell parameter {written} cannot be known here and was left out")
        return ""

    def _note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)


def split_words(line: str, expander: _Expander) -> list[str | None]:
    """Shell words of one logical line; ``None`` marks a command boundary (``;``, ``&&``, ...)."""
    words: list[str | None] = []
    current: list[str] = []
    in_word = False
    index = 0
    while index < len(line):
        char = line[index]
        if char in " \t":
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
            index += 1
        elif char == "#" and not in_word:
            break
        elif char == "'":
            end = line.find("'", index + 1)
            if end < 0:
                raise UserError(f"unclosed single quote in: {line.strip()}")
            current.append(line[index + 1 : end])
            in_word, index = True, end + 1
        elif char == '"':
            text, index = _double_quoted(line, index + 1, expander)
            current.append(text)
            in_word = True
        elif char == "\\":
            current.append(line[index + 1 : index + 2])
            in_word, index = True, index + 2
        elif char == "$":
            value, index = expander.expand(line, index)
            current.append(value)
            in_word = True
        elif any(line.startswith(operator, index) for operator in _OPERATORS):
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
            operator = next(op for op in _OPERATORS if line.startswith(op, index))
            words.append(None)
            index += len(operator)
        else:
            current.append(char)
            in_word, index = True, index + 1
    if in_word:
        words.append("".join(current))
    return words


def _double_quoted(line: str, index: int, expander: _Expander) -> tuple[str, int]:
    parts: list[str] = []
    while index < len(line):
        char = line[index]
        if char == '"':
            return "".join(parts), index + 1
        if char == "\\" and line[index + 1 : index + 2] in ('"', "\\", "$", "`"):
            parts.append(line[index + 1])
            index += 2
        elif char == "$":
            value, index = expander.expand(line, index)
            parts.append(value)
        else:
            parts.append(char)
            index += 1
    raise UserError(f"unclosed double quote in: {line.strip()}")


def logical_lines(script: str) -> list[tuple[int, str]]:
    """Join backslash-continued lines; returns (first line number, text) pairs."""
    joined: list[tuple[int, str]] = []
    buffer: list[str] = []
    first_number = 1
    for number, raw in enumerate(script.splitlines(), start=1):
        if not buffer:
            first_number = number
        trailing = len(raw) - len(raw.rstrip("\\"))
        if trailing % 2 == 1:
            buffer.append(raw[:-1])
            continue
        buffer.append(raw)
        joined.append((first_number, " ".join(buffer)))
        buffer = []
    if buffer:
        joined.append((first_number, " ".join(buffer)))
    return joined


def _commands(words: list[str | None]) -> list[list[str]]:
    commands, current = [], []
    for word in words:
        if word is None:
            if current:
                commands.append(current)
            current = []
        else:
            current.append(word)
    if current:
        commands.append(current)
    return commands


def _entry_point_end(words: list[str]) -> int | None:
    """Index just past the entry point (``-m verl.trainer.main_ppo`` or ``.../main_ppo.py``)."""
    for index, word in enumerate(words):
        if word == ENTRY_POINT_MODULE or word.endswith("verl/trainer/main_ppo.py"):
            return index + 1
    return None


def _split_options(words: list[str]) -> tuple[list[str], list[str]]:
    """Separate ``key=value`` overrides from Hydra options such as ``--config-name x``."""
    overrides, options = [], []
    index = 0
    while index < len(words):
        word = words[index]
        if word.startswith("-"):
            takes_value = "=" not in word and index + 1 < len(words) and not words[index + 1].startswith("-")
            takes_value = takes_value and "=" not in words[index + 1]
            options.append(f"{word} {words[index + 1]}" if takes_value else word)
            index += 2 if takes_value else 1
        elif word:
            overrides.append(word)
            index += 1
        else:
            index += 1
    return overrides, options


def extract_from_script(script: str, source_name: str = "the script") -> ExtractedCommand:
    """The arguments of the one ``python -m verl.trainer.main_ppo`` command in ``script``."""
    variables: dict[str, str] = {}
    notes: list[str] = []
    expander = _Expander(variables, notes)
    found: list[tuple[int, list[str]]] = []
    for line_number, line in logical_lines(script):
        for command in _commands(split_words(line, expander)):
            end = _entry_point_end(command)
            if end is not None:
                found.append((line_number, command[end:]))
                continue
            # Plain assignments (``a=1 b=2`` alone on a command) define script variables.
            if all(_ASSIGNMENT.match(word) for word in command) or command[0] == "export":
                for word in command[1:] if command[0] == "export" else command:
                    match = _ASSIGNMENT.match(word)
                    if match:
                        variables[match.group(1)] = word[match.end() :]
    if not found:
        raise UserError(f"no 'python3 -m {ENTRY_POINT_MODULE}' command found in {source_name}")
    if len(found) > 1:
        lines = ", ".join(str(number) for number, _ in found)
        raise UserError(
            f"{source_name} runs {ENTRY_POINT_MODULE} {len(found)} times (lines {lines}); "
            "keep the one to convert in a script of its own"
        )
    overrides, options = _split_options(found[0][1])
    return ExtractedCommand(arguments=overrides, notes=notes, ignored_options=options)


_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def extract_from_arguments(words: list[str]) -> ExtractedCommand:
    """The same, for arguments given on trivium's own command line (already split by the shell).

    A leading ``python3 -m verl.trainer.main_ppo`` is skipped; ``$NAME`` references that the
    shell left alone (single-quoted) become environment references.
    """
    end = _entry_point_end(words)
    words = words[end:] if end is not None else list(words)
    notes: list[str] = []

    def to_reference(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        message = f"${name} is read from the environment at run time"
        if message not in notes:
            notes.append(message)
        return environment_reference(name)

    words = [_ENV_REFERENCE.sub(to_reference, word) for word in words]
    overrides, options = _split_options(words)
    return ExtractedCommand(arguments=overrides, notes=notes, ignored_options=options)
