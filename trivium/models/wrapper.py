"""ModelWrapper: what workflows call to sample from the rollout model.

Owns the step from messages or text to Experiences: chat template, prompt limits, rollout
arguments, and the fields every experience carries (exact token ids, engine logprobs, model
version, truncation flags). Concurrent calls from threads or coroutines are merged into
shared engine batches by a RequestBatcher. Knows nothing about how the engine samples.

Multi-turn chats are token-in, token-out: every reply ``chat`` samples is remembered as a
``Conversation`` (see ``conversation.py``). When a later call sends that conversation back
(the earlier messages and the reply, plus new environment or tool messages), the new turn
continues the exact token sequence the model produced, and the experience returned covers
the whole episode: one prompt, then every turn, with ``action_mask`` marking the model's
tokens. An episode that reaches ``max_model_len`` ends with ``episode_truncated`` set.
With ``enable_history`` the latest experience of each conversation is kept for
``extract_experience_from_history``: a turn replaces the record of the conversation it
continues, which ``conversation_memory.py`` chooses so that equal conversations of
different episodes never share a record.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import threading
from concurrent.futures import Future
from typing import Any

import torch

from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.models.chat import encode_text_prompt, fit_prompt, load_chat_template
from trivium.models.conversation import Conversation, Renderer
from trivium.models.conversation_memory import Continuation, ConversationMemory
from trivium.models.engine.base import GenerationOutput, InferenceEngine, SamplingParams
from trivium.models.engine.batcher import RequestBatcher
from trivium.models.engine.busy_clients import BusyClients
from trivium.models.reasoning import ReasoningParser, reasoning_parser_named
from trivium.models.tool_calls import ToolCallParser, tool_call_parser_named
from trivium.models.wrapper_clients import OpenAIClients

logger = logging.getLogger(__name__)

ROLLOUT_ARG_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "max_tokens",
    "min_tokens",
    "n",
    "seed",
    "logprobs",
)


class ModelWrapper(OpenAIClients):
    def __init__(
        self,
        engine: InferenceEngine,
        *,
        chat_template: str | None = None,
        chat_template_path: str | None = None,
        max_prompt_tokens: int | None = None,
        max_response_tokens: int | None = None,
        min_response_tokens: int = 1,
        max_model_len: int | None = None,
        enable_prompt_truncation: bool = True,
        default_rollout_args: dict[str, Any] | None = None,
        enable_history: bool = False,
        enable_thinking: bool | None = None,
        tool_call_parser: str | None = None,
        reasoning_parser: str | None = None,
    ):
        if max_response_tokens is None and max_model_len is None:
            raise UserError(
                "set model.max_response_tokens or model.max_model_len: the response length needs a limit"
            )
        if max_response_tokens is not None and not 0 <= min_response_tokens <= max_response_tokens:
            raise UserError(
                f"model.min_response_tokens ({min_response_tokens}) must be between 0 and "
                f"model.max_response_tokens ({max_response_tokens})"
            )
        self.engine = engine
        self.chat_template = load_chat_template(chat_template, chat_template_path)
        self.max_prompt_tokens = max_prompt_tokens
        self.max_response_tokens = max_response_tokens
        self.min_response_tokens = min_response_tokens
        self.max_model_len = max_model_len
        self.enable_prompt_truncation = enable_prompt_truncation
        self.default_rollout_args = self._checked_args(default_rollout_args or {})
        self.enable_history = enable_history
        self.enable_thinking = enable_thinking
        self.reply_prefix = ""  # set on a workflow's view (for_workflow)
        self.clients = BusyClients()
        self._batcher = RequestBatcher(engine, busy=self.clients)
        self.tool_call_parser: ToolCallParser | None = tool_call_parser_named(tool_call_parser)
        self.reasoning_parser: ReasoningParser | None = reasoning_parser_named(reasoning_parser)
        self.renderer = Renderer(engine.tokenizer, self.chat_template, enable_thinking)
        self._history: dict[str, Experience] = {}
        self._history_lock = threading.Lock()
        self._memory = ConversationMemory()
        # Turns where the chat template was not prefix-preserving (see conversation.py); shared
        # with the wrapper's workflow views.
        self._drift = {"events": 0, "warned": False}
        # Set on a workflow view when the engine is served over HTTP (enable_openai_api).
        self.openai_base_url: str | None = None
        self.openai_api_key: str | None = None
        self.openai_model_name = "policy"

    # ---- public API ----------------------------------------------------------------------

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def share_busy_clients(self, clients: BusyClients) -> None:
        """Use the gauge the runner pool updates, so requests of one step are merged."""
        self.clients = self._batcher.busy = clients

    @property
    def model_version(self) -> int:
        return self.engine.version()

    @property
    def template_drift_events(self) -> int:
        return self._drift["events"]

    def for_workflow(self, *, enable_thinking: bool | None = None, reply_prefix: str | None = None) -> ModelWrapper:
        """A view of this wrapper for one workflow: the same engine and batches, but a history
        and remembered conversations of its own, so ``extract_experience_from_history`` returns
        only what that workflow sampled while other workflows share the engine, and a turn
        never continues (nor replaces the record of) another workflow's equal conversation.

        ``enable_thinking``: the task's taskset setting (``format.enable_thinking``), the view's
        default instead of the model's. ``reply_prefix`` (``format.reply_prefix``): text every
        reply of the view's conversations starts with, written after the generation prompt as
        prompt tokens; the model continues after it, and its replies (``response_text``, the
        returned messages) hold only what it sampled.
        """
        view = copy.copy(self)
        view._history = {}
        view._history_lock = threading.Lock()
        view._memory = ConversationMemory(self._memory.max_tokens)
        if enable_thinking is not None:
            view.enable_thinking = enable_thinking
            view.renderer = self._renderer(enable_thinking)
        if reply_prefix:
            view.reply_prefix = reply_prefix
        return view

    def chat(
        self, messages: list[dict], n: int = 1, *, tools: list[dict] | None = None,
        enable_thinking: bool | None = None, **rollout_args,
    ) -> list[Experience]:
        """``n`` sampled replies to ``messages``; a conversation sent back continues token-exactly.

        ``enable_thinking`` (for templates that read it) overrides the wrapper's for a new
        conversation; a continued one keeps the setting it started with.
        """
        return [e for e, _ in self.chat_turns(messages, n, tools=tools, enable_thinking=enable_thinking, **rollout_args)]

    def chat_turns(
        self, messages: list[dict], n: int = 1, *, tools: list[dict] | None = None,
        enable_thinking: bool | None = None, **rollout_args,
    ) -> list[tuple[Experience, dict]]:
        """Like ``chat``, each experience with the reply as an OpenAI-style assistant message."""
        conversation, request, continued = self._turn_request(messages, tools, n, rollout_args, enable_thinking)
        outputs = None if request is None else self._wait(self._submit_turn(request), continued)
        if outputs is None:  # no room for another turn
            return self._ended(conversation, n)
        return self._finish_turns(conversation, request, outputs[0])

    def generate(self, prompts: list[str], n: int = 1, **rollout_args) -> list[list[Experience]]:
        """``n`` continuations of each raw-text prompt, all sampled in one engine call."""
        requests = [self._text_request(prompt, n, rollout_args) for prompt in prompts]
        if not requests:
            return []
        return self._finish(requests, self._wait(self._batcher.submit(*self._engine_inputs(requests))))

    async def chat_async(
        self, messages: list[dict], n: int = 1, *, tools: list[dict] | None = None,
        enable_thinking: bool | None = None, **rollout_args,
    ) -> list[Experience]:
        turns = await self.chat_turns_async(messages, n, tools=tools, enable_thinking=enable_thinking, **rollout_args)
        return [e for e, _ in turns]

    async def chat_turns_async(
        self, messages: list[dict], n: int = 1, *, tools: list[dict] | None = None,
        enable_thinking: bool | None = None, **rollout_args,
    ) -> list[tuple[Experience, dict]]:
        conversation, request, continued = self._turn_request(messages, tools, n, rollout_args, enable_thinking)
        outputs = None if request is None else await self._wait_async(self._submit_turn(request), continued)
        if outputs is None:
            return self._ended(conversation, n)
        return self._finish_turns(conversation, request, outputs[0])

    async def generate_async(self, prompts: list[str], n: int = 1, **rollout_args) -> list[list[Experience]]:
        requests = [self._text_request(prompt, n, rollout_args) for prompt in prompts]
        if not requests:
            return []
        outputs = await self._wait_async(self._batcher.submit(*self._engine_inputs(requests)))
        return self._finish(requests, outputs)

    def logprobs(self, tokens: list[int] | torch.Tensor, prompt_length: int) -> torch.Tensor:
        """(len(tokens) - prompt_length,) raw-logit logprobs of the response tokens."""
        if isinstance(tokens, torch.Tensor):
            tokens = tokens.tolist()
        return self.engine.compute_logprobs([list(tokens)], [prompt_length])[0]

    def extract_experience_from_history(self, clear: bool = True) -> list[Experience]:
        """Experiences sampled since the last extraction (only with ``enable_history``).

        One per conversation branch: a turn that continues a recorded conversation replaces
        its earlier, shorter experience, so a multi-turn episode comes out once, whole.
        """
        with self._history_lock:
            experiences = list(self._history.values())
            if clear:
                self._history.clear()
        return experiences

    def park(self) -> None:
        """Release the engine's serving thread until the next request (between steps)."""
        self._batcher.park()
        self.engine.park()

    def close(self) -> None:
        self._batcher.close()

    # ---- request building ----------------------------------------------------------------

    def _checked_args(self, args: dict[str, Any]) -> dict[str, Any]:
        unknown = set(args) - set(ROLLOUT_ARG_KEYS)
        if unknown:
            raise UserError(f"Unknown rollout argument(s) {sorted(unknown)}; valid: {list(ROLLOUT_ARG_KEYS)}")
        return {key: value for key, value in args.items() if value is not None}

    def _turn_request(
        self, messages, tools, n, rollout_args, enable_thinking=None
    ) -> tuple[Conversation, dict | None, Continuation | None]:
        """The conversation of a chat turn, its engine request (None: no room for the turn), and
        the remembered conversation it continues (None: a new conversation)."""
        if not messages:
            raise UserError("chat() needs at least one message")
        continued = self._memory.take(messages, tools)
        with self._giving_back_on_failure(continued):
            conversation = self._conversation_for(messages, tools, continued, enable_thinking)
            return conversation, self._turn_engine_request(conversation, n, rollout_args), continued

    @contextlib.contextmanager
    def _giving_back_on_failure(self, continued: Continuation | None):
        """A turn that fails (or is cancelled) replaces no record: the conversation it took is
        given back, so a retry is still its first continuation."""
        try:
            yield
        except BaseException:
            self._memory.give_back(continued)
            raise

    def _conversation_for(
        self, messages: list[dict], tools: list[dict] | None, continued: Continuation | None,
        enable_thinking: bool | None,
    ) -> Conversation:
        """The remembered conversation ``messages`` continue, grown by the new messages; else a new one."""
        if continued is None:
            renderer = self._renderer(enable_thinking)
            text = renderer.text(messages, tools) + self.reply_prefix
            return Conversation.start(
                messages=messages, tools=tools, ids=renderer.ids(text), text=text, prompt_truncated=False,
                renderer=renderer, reply_prefix=self.reply_prefix,
            )
        known = continued.conversation
        grown = known.with_environment(messages[continued.continues :], known.renderer or self.renderer)
        self._note_drift(known, grown)
        if self.max_model_len is not None and len(grown.tokens) >= self.max_model_len:
            ended = known.fork()  # the environment's reply does not fit: the episode ends here
            ended.truncated = True
            return ended
        return grown

    def _renderer(self, enable_thinking: bool | None) -> Renderer:
        if enable_thinking is None or enable_thinking == self.enable_thinking:
            return self.renderer
        return Renderer(self.tokenizer, self.chat_template, enable_thinking)

    def _turn_engine_request(self, conversation: Conversation, n, rollout_args) -> dict | None:
        if conversation.truncated:
            return None
        if conversation.model_turns == 0:  # the first turn: the usual prompt limits apply
            request = self._request(conversation.prompt_text, conversation.tokens, n, rollout_args)
            if request["truncated"]:
                conversation.tokens = list(request["ids"])
                conversation.prompt_length = len(request["ids"])
                conversation.prompt_text = conversation.text = request["prompt_text"]
                conversation.prompt_truncated = True
            return request
        room = None if self.max_model_len is None else self.max_model_len - len(conversation.tokens)
        if room is not None and room < 1:
            conversation.truncated = True
            return None
        return self._request(conversation.text, conversation.tokens, n, rollout_args, room=room)

    def _text_request(self, prompt: str, n, rollout_args) -> dict:
        return self._request(prompt, encode_text_prompt(self.tokenizer, prompt), n, rollout_args)

    def _request(
        self, text: str, ids: list[int], n: int, rollout_args: dict, *, room: int | None = None
    ) -> dict:
        """One engine request. ``room``: a later turn's space left in the context (no prompt limits)."""
        args = {**self.default_rollout_args, **self._checked_args(rollout_args)}
        if n != 1 or "n" not in args:  # an explicit n wins over rollout_args' n
            args["n"] = n
        # A caller's max_tokens and model.max_response_tokens: the smaller wins
        limits = [limit for limit in (args.pop("max_tokens", None), self.max_response_tokens) if limit]
        max_tokens = min(limits) if limits else None
        if max_tokens is None:  # no response limit configured: fill the context
            max_tokens = self.max_model_len - min(len(ids), self.max_prompt_tokens or len(ids))
        fitted = fit_prompt(
            ids,
            max_tokens=max_tokens if room is None else min(max_tokens, room),
            max_prompt_tokens=self.max_prompt_tokens if room is None else None,
            max_model_len=self.max_model_len,
            enable_prompt_truncation=self.enable_prompt_truncation,
        )
        min_tokens = min(args.pop("min_tokens", self.min_response_tokens), fitted.max_tokens)
        args["logprobs"] = True  # experiences always carry sampled-token logprobs
        params = SamplingParams(max_tokens=fitted.max_tokens, min_tokens=min_tokens, **args)
        prompt_text = self.tokenizer.decode(fitted.ids) if fitted.truncated else text
        return {
            "ids": fitted.ids,
            "params": params,
            "truncated": fitted.truncated,
            "prompt_text": prompt_text,
        }

    def _engine_inputs(self, requests: list[dict]) -> tuple[list[list[int]], list[SamplingParams]]:
        return [r["ids"] for r in requests], [r["params"] for r in requests]

    def _submit_turn(self, request: dict) -> Future:
        return self._batcher.submit([request["ids"]], [request["params"]])

    def _wait(self, future: Future, continued: Continuation | None = None) -> list[list[GenerationOutput]]:
        """The engine's outputs; a failure (or cancellation) meanwhile gives ``continued`` back."""
        with self._giving_back_on_failure(continued), self.clients.waiting():
            return future.result()

    async def _wait_async(
        self, future: Future, continued: Continuation | None = None
    ) -> list[list[GenerationOutput]]:
        with self._giving_back_on_failure(continued), self.clients.waiting():
            return await asyncio.wrap_future(future)

    def _finish(self, requests: list[dict], outputs: list[list[GenerationOutput]]) -> list[list[Experience]]:
        results = []
        for request, samples in zip(requests, outputs):
            experiences = [self._experience(request, sample) for sample in samples]
            results.append(experiences)
        if self.enable_history:
            with self._history_lock:
                self._history.update((e.eid, e) for group in results for e in group)
        return results

    def _finish_turns(
        self, conversation: Conversation, request: dict, outputs: list[GenerationOutput]
    ) -> list[tuple[Experience, dict]]:
        results = []
        for output in outputs:
            visible = self._assistant_message(output.text)
            grown = conversation.with_model_turn(
                output,
                # The template renders the reply whole, its prefix included (it is in the tokens).
                rendered_message={"role": "assistant", "content": conversation.reply_prefix + output.text},
                visible_message=visible,
                tokenizer=self.tokenizer,
            )
            # A reply cut by the context, not by the response limit, ends the episode.
            grown.truncated = (
                output.finish_reason == "length"
                and self.max_model_len is not None
                and len(grown.tokens) >= self.max_model_len
            )
            self._memory.remember(grown)
            experience = grown.to_experience()
            self._record(grown, experience)
            results.append((experience, visible))
        return results

    def _ended(self, conversation: Conversation, n: int) -> list[tuple[Experience, dict]]:
        """No room for another turn: the episode so far, flagged, with an empty reply."""
        experience = conversation.to_experience()
        experience.response_text = ""
        self._record(conversation, experience)
        return [(experience, {"role": "assistant", "content": ""}) for _ in range(n)]

    def _assistant_message(self, text: str) -> dict:
        """The reply as an OpenAI assistant message: thinking and tool calls split out when parsers are set."""
        reasoning, answer = self.reasoning_parser.split(text) if self.reasoning_parser else (None, text)
        content, tool_calls = self.tool_call_parser.parse(answer) if self.tool_call_parser else (answer, [])
        message = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        if tool_calls:
            message["tool_calls"] = tool_calls
        return message

    def _record(self, conversation: Conversation, experience: Experience) -> None:
        if not self.enable_history or conversation.model_turns == 0:
            return
        with self._history_lock:
            self._history.pop(conversation.previous_turn_id or "", None)
            self._history[conversation.turn_id] = experience

    def _note_drift(self, before: Conversation, after: Conversation) -> None:
        new = [d for d in after.drifts[len(before.drifts) :] if d.kind == "text"]
        if not new:
            return
        self._drift["events"] += len(new)
        if not self._drift["warned"]:
            self._drift["warned"] = True
            drift = new[0]
            logger.warning(
                "the chat template is not prefix-preserving for this model: rendering turn %d does not "
                "start with turn %d's tokens (%s). Episodes continue from the exact tokens the model saw; "
                "each such turn counts in the template_drift metric.",
                drift.turn + 1,
                drift.turn,
                drift.detail,
            )

    @staticmethod
    def _experience(request: dict, sample: GenerationOutput) -> Experience:
        response = len(sample.token_ids)
        return Experience(
            tokens=torch.tensor(sample.prompt_ids + sample.token_ids, dtype=torch.long),
            prompt_length=len(sample.prompt_ids),
            logprobs=torch.tensor(sample.logprobs, dtype=torch.float32) if sample.logprobs else None,
            action_mask=torch.ones(response, dtype=torch.bool),
            model_version=sample.model_version,
            prompt_truncated=request["truncated"],
            prompt_text=request["prompt_text"],
            response_text=sample.text,
            info={"finish_reason": sample.finish_reason},
            sampling_mask=sample.sampling_mask,
        )
