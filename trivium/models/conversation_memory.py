"""The conversations a model wrapper (or one workflow's view of it) remembers, for continuation.

Owns which remembered conversation a request continues. A caller sends a conversation back
by its messages, but equal messages are not one episode: the episodes of a task often sample
the same replies (greedy sampling, a fixed seed, a short answer), and a conversation chosen
by its content alone may be another episode's. Whose record a turn replaces follows from the
conversation it continues (``Conversation.previous_turn_id``), so that choice decides whether
each episode is recorded once, whole:

- each workflow view has a memory of its own (``ModelWrapper.for_workflow``): a turn
  continues only a conversation its own workflow sampled, whose record is in that
  workflow's history;
- equal conversations within one memory are held side by side, never one in place of
  another; a request takes one that no request has continued yet, so each is continued
  once, and its record replaced once. Only when all of them have been continued does a
  request branch from one again (the new branch is recorded on its own). A turn that fails
  gives its conversation back.

Bounded by the tokens held: the least recently used are forgotten first (a forgotten one
sent back is rendered from its messages, as a first turn). Knows nothing about engines,
sampling or histories.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from trivium.models.conversation import Conversation, conversation_key

# Tokens of the conversations one memory holds before it forgets the least recently used.
MAX_REMEMBERED_TOKENS = 4_000_000


@dataclass(frozen=True)
class Continuation:
    """A remembered conversation a request continues: the first ``continues`` messages are its own."""

    conversation: Conversation
    continues: int
    first: bool  # no request had continued it before: this one replaces its record


class ConversationMemory:
    """Sampled conversations by their messages; safe from many threads."""

    def __init__(self, max_tokens: int = MAX_REMEMBERED_TOKENS):
        self.max_tokens = max_tokens
        self._by_turn: OrderedDict[str, Conversation] = OrderedDict()  # least recently used first
        self._turns_by_key: dict[str, list[str]] = {}  # equal conversations, oldest first
        self._continued: set[str] = set()
        self._tokens = 0
        self._lock = threading.Lock()

    def remember(self, conversation: Conversation) -> None:
        """Keep a conversation that just got a model turn, next to any equal ones."""
        turn = conversation.turn_id
        with self._lock:
            self._by_turn[turn] = conversation
            self._turns_by_key.setdefault(conversation.key, []).append(turn)
            self._tokens += len(conversation.tokens)
            while self._tokens > self.max_tokens and len(self._by_turn) > 1:
                self._forget_oldest()

    def take(self, messages: list[dict], tools: list[dict] | None) -> Continuation | None:
        """The remembered conversation ``messages`` continue (the longest that ends with a model
        turn), one not continued yet when there is one; None for a new conversation."""
        with self._lock:
            for end in range(len(messages), 0, -1):
                if messages[end - 1].get("role") != "assistant":
                    continue
                turns = self._turns_by_key.get(conversation_key(messages[:end], tools))
                if not turns:
                    continue
                fresh = next((turn for turn in turns if turn not in self._continued), None)
                turn = fresh if fresh is not None else turns[-1]
                self._continued.add(turn)
                self._by_turn.move_to_end(turn)
                return Continuation(self._by_turn[turn], end, first=fresh is not None)
        return None

    def give_back(self, continuation: Continuation | None) -> None:
        """The continuing turn failed: its conversation can be continued again as if never taken."""
        if continuation is None or not continuation.first:
            return
        with self._lock:
            self._continued.discard(continuation.conversation.turn_id)

    def _forget_oldest(self) -> None:
        turn, oldest = self._by_turn.popitem(last=False)
        self._tokens -= len(oldest.tokens)
        self._continued.discard(turn)
        equal = self._turns_by_key[oldest.key]
        equal.remove(turn)
        if not equal:
            del self._turns_by_key[oldest.key]
