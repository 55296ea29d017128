"""ConversationMemory: equal conversations are continued one each, then branched; forgetting is by tokens."""

from trivium.models.conversation import Conversation
from trivium.models.conversation_memory import ConversationMemory

QUESTION = {"role": "user", "content": "Where to?"}
REPLY = {"role": "assistant", "content": "North."}
NEXT = {"role": "user", "content": "Then?"}


def sampled(turn_id: str, tokens: int = 4, reply: dict = REPLY) -> Conversation:
    messages = [QUESTION, reply]
    return Conversation(
        messages=messages, visible_messages=messages, tools=None, tokens=list(range(tokens)), prompt_length=2,
        prompt_text="", text="", model_turns=1, turn_id=turn_id,
    )


def test_equal_conversations_are_continued_once_each_before_one_is_branched():
    memory = ConversationMemory()
    for turn_id in ("a", "b"):
        memory.remember(sampled(turn_id))
    taken = [memory.take([QUESTION, REPLY, NEXT], None) for _ in range(3)]
    assert [t.conversation.turn_id for t in taken] == ["a", "b", "b"]
    assert [t.first for t in taken] == [True, True, False]
    assert all(t.continues == 2 for t in taken)
    assert memory.take([QUESTION, {"role": "assistant", "content": "South."}, NEXT], None) is None


def test_a_conversation_given_back_is_taken_first_again_and_a_branch_gives_back_nothing():
    memory = ConversationMemory()
    memory.remember(sampled("a"))
    memory.remember(sampled("b"))
    failed = memory.take([QUESTION, REPLY, NEXT], None)
    memory.give_back(failed)
    assert memory.take([QUESTION, REPLY, NEXT], None).conversation.turn_id == "a"
    assert memory.take([QUESTION, REPLY, NEXT], None).conversation.turn_id == "b"
    branch = memory.take([QUESTION, REPLY, NEXT], None)
    memory.give_back(branch)  # "b" was continued before the branch: it stays continued
    assert memory.take([QUESTION, REPLY, NEXT], None).first is False


def test_the_least_recently_used_are_forgotten_past_the_token_bound():
    memory = ConversationMemory(max_tokens=10)
    memory.remember(sampled("a"))
    memory.remember(sampled("b"))
    memory.take([QUESTION, REPLY], None)  # "a" is used again: "b" is now the oldest
    memory.remember(sampled("c", reply={"role": "assistant", "content": "East."}))
    assert memory.take([QUESTION, REPLY], None).conversation.turn_id == "a"  # "b" was forgotten
    assert memory.take([QUESTION, REPLY], None).first is False
    assert memory.take([QUESTION, {"role": "assistant", "content": "East."}], None).conversation.turn_id == "c"
