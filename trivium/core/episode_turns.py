"""The turns of a multi-turn episode: each message's role and text, and the tokens that hold it.

Owns the record a multi-turn experience keeps in ``info["turns"]``, so a stored episode can be
read message by message (``trivium view --turns``, the Studio's experience browser) without a
tokenizer. Each turn is a plain dict:

  ``role``     the message's role (``system``, ``user``, ``assistant``, ``tool``, ...);
  ``text``     its content as the model saw it (an assistant turn: the text the model wrote);
  ``start``, ``end``   the span of ``tokens`` (indices into the whole sequence, prompt
               included) that holds it; messages added together (the prompt's system and user
               messages, two tool results of one step) share one span;
  ``trained``  True for the model's turns, whose tokens have ``action_mask`` True.

The spans come from the action mask: after the prompt, each run of model tokens is one
assistant message and each run of other tokens holds the messages the environment added
between two replies. Knows nothing about models, tokenizers or storage.
"""

from __future__ import annotations

from typing import Any

TURNS_KEY = "turns"


def episode_turns(
    *,
    messages: list[dict],
    prompt_messages: int,
    prompt_length: int,
    action_mask: list[bool],
    reply_prefix: str = "",
) -> list[dict[str, Any]]:
    """The turns of an episode whose ``messages`` (as rendered) begin with ``prompt_messages``
    prompt messages, then alternate between one assistant reply and the messages that answered it.

    ``action_mask`` covers the tokens after the prompt (``prompt_length`` of them precede it).
    An assistant turn's text drops ``reply_prefix``, which the template wrote and the model did not.
    """
    turns = [_turn(message, 0, prompt_length, trained=False) for message in messages[:prompt_messages]]
    position = 0  # in action_mask
    later = messages[prompt_messages:]
    index = 0
    while index < len(later):
        if later[index].get("role") == "assistant":
            end = _run_end(action_mask, position, True)
            turn = _turn(later[index], prompt_length + position, prompt_length + end, trained=True)
            if reply_prefix and turn["text"].startswith(reply_prefix):
                turn["text"] = turn["text"][len(reply_prefix) :]
            turns.append(turn)
            index += 1
        else:
            end = _run_end(action_mask, position, False)
            while index < len(later) and later[index].get("role") != "assistant":
                turns.append(
                    _turn(later[index], prompt_length + position, prompt_length + end, trained=False)
                )
                index += 1
        position = end
    return turns


def latest_reply(experience: Any) -> str:
    """The text of the episode's latest model turn ("" when its last turn had no room);
    ``response_text`` for an experience without recorded turns (a single turn)."""
    turns = experience.info.get(TURNS_KEY)
    if not turns:
        return experience.response_text or ""
    last = turns[-1]
    return last["text"] if last["trained"] else ""


def message_text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


def _turn(message: dict, start: int, end: int, *, trained: bool) -> dict[str, Any]:
    return {
        "role": str(message.get("role", "")),
        "text": message_text(message.get("content")),
        "start": start,
        "end": end,
        "trained": trained,
    }


def _run_end(mask: list[bool], start: int, value: bool) -> int:
    end = start
    while end < len(mask) and bool(mask[end]) == value:
        end += 1
    return end
