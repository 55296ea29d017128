"""Multi-turn environment workflows: the model acts, the environment answers, until done.

Owns the step/observe loop shared by the built-in environments. A subclass says how an
episode starts (``reset``: the first messages) and what one reply does (``step``: the next
observation, a reward, done or not). The loop sends each observation back as a user
message; the model wrapper continues the exact token sequence (token-in, token-out), so
the last experience is the whole episode, its ``action_mask`` marking the model's turns.

``MultiTurnEnvWorkflow`` returns that one experience per episode, rewarded with the sum of
the step rewards. ``StepWiseRewardWorkflow`` returns one experience per step instead (the
turn as response, everything before it as prompt), all sharing an ``episode_id``; its
``reward_propagation`` gives every step either the episode's final reward (``final``) or
its own (``step``); each step also carries its own reward as ``info['step_reward']`` and,
when the environment names its state (``state_key``), ``info['env_state_hash']``.

``WonOrLostGame`` scores the steps of a game that is won or lost (frozen lake, guessing).

workflow_args: ``max_env_steps`` (model turns per episode), ``system_prompt``.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from trivium.core.episode_turns import latest_reply
from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.workflows.base import Workflow


@dataclass
class EnvStep:
    """What one reply did: the next observation (None when done), the reward, done."""

    observation: str | None
    reward: float
    done: bool
    metrics: dict[str, float] = field(default_factory=dict)


class GameResult(Protocol):
    """What a game's move returns (``trivium.envs``): whether it ended the game, won it, was a move."""

    done: bool
    success: bool
    valid: bool


class WonOrLostGame:
    """The environment half of a game that is won or lost: a step's reward is 1 for the win, else
    0, and the episode's ``accuracy`` is whether it was won. Mixed in before the workflow class."""

    won = False

    def game_step(self, result: GameResult, observation: str, *, invalid_metric: str) -> EnvStep:
        """The step a move made: ``observation`` unless the game is over; ``invalid_metric`` is 1
        when the reply was no valid move."""
        self.won = result.success
        return EnvStep(
            observation=None if result.done else observation,
            reward=1.0 if result.success else 0.0,
            done=result.done,
            metrics={invalid_metric: 0.0 if result.valid else 1.0},
        )

    def episode_metrics(self) -> dict[str, float]:
        return {"accuracy": 1.0 if self.won else 0.0}


class MultiTurnEnvWorkflow(Workflow):
    can_repeat = False  # one episode per workflow; repeats run as concurrent episodes
    workflow_arg_names = ("max_env_steps", "system_prompt")
    episode_arg_names: tuple[str, ...] = ()  # the workflow_args a game half reads (a mixin's own)
    default_max_env_steps = 10

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A workflow made of a game half and this loop accepts both halves' arguments.
        cls.workflow_arg_names = tuple(dict.fromkeys(cls.workflow_arg_names + cls.episode_arg_names))

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_env_steps = int(self.workflow_args.get("max_env_steps", self.default_max_env_steps))
        if self.max_env_steps < 1:
            raise UserError(f"workflow_args.max_env_steps must be >= 1, got {self.max_env_steps}")

    # ---- what a subclass provides -----------------------------------------------------------

    def reset(self) -> list[dict]:
        """The episode's first messages."""
        raise NotImplementedError(f"{type(self).__name__} must implement reset()")

    def step(self, reply: str) -> EnvStep:
        """Apply the model's reply to the environment."""
        raise NotImplementedError(f"{type(self).__name__} must implement step(reply)")

    def episode_metrics(self) -> dict[str, float]:
        """Metrics of the finished episode (e.g. ``accuracy`` = success)."""
        return {}

    def state_key(self) -> str | None:
        """A hash of the environment's current state (the task's environment and the position
        in it), or None when the environment cannot name it. Step-wise rows carry it as
        ``info['env_state_hash']``, the anchor state that gigpo groups steps by."""
        return None

    # ---- the loop -----------------------------------------------------------------------------

    def sampling_args(self) -> dict[str, Any]:
        return {key: value for key, value in self.task.rollout_args.items() if key != "n"}

    def run(self) -> list[Experience]:
        return asyncio.run(self.run_async())

    async def run_async(self) -> list[Experience]:
        turns = await self.play()
        return self.finish(turns)

    async def play(self) -> list[tuple[Experience, EnvStep | None]]:
        """Each model turn's experience (the episode so far) with what its reply did."""
        messages = self.reset()
        turns: list[tuple[Experience, EnvStep | None]] = []
        self.turn_states: list[str | None] = []  # the state each turn acted from
        for _ in range(self.max_env_steps):
            self.turn_states.append(self.state_key())
            (experience,) = await self.model.chat_async(messages, **self.sampling_args())
            if experience.episode_truncated:  # no room left in the context: the episode ends here
                turns.append((experience, None))
                break
            reply = latest_reply(experience)
            result = self.step(reply)
            turns.append((experience, result))
            if result.done or result.observation is None:
                break
            messages = messages + [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": result.observation},
            ]
        return turns

    def finish(self, turns: list[tuple[Experience, EnvStep | None]]) -> list[Experience]:
        episode = turns[-1][0]
        episode.reward = sum(result.reward for _, result in turns if result is not None)
        self.fill(episode, turns)
        return [episode]

    def fill(self, experience: Experience, turns: list[tuple[Experience, EnvStep | None]]) -> None:
        experience.metrics.update(self.episode_metrics())
        experience.metrics["env_steps"] = float(sum(result is not None for _, result in turns))
        for _, result in turns:
            for key, value in (result.metrics if result is not None else {}).items():
                experience.metrics[key] = experience.metrics.get(key, 0.0) + value
        experience.group_id = self.task.task_id
        experience.task_id = self.task.task_id
        experience.info.update(task_index=self.task.index, taskset=self.task.taskset_name)


REWARD_PROPAGATIONS = ("final", "step")


class StepWiseRewardWorkflow(MultiTurnEnvWorkflow):
    workflow_arg_names = MultiTurnEnvWorkflow.workflow_arg_names + ("reward_propagation",)

    def finish(self, turns: list[tuple[Experience, EnvStep | None]]) -> list[Experience]:
        propagation = self.workflow_args.get("reward_propagation", "final")
        if propagation not in REWARD_PROPAGATIONS:
            raise UserError(
                f"workflow_args.reward_propagation must be one of {', '.join(REWARD_PROPAGATIONS)}, "
                f"got {propagation!r}"
            )
        step_rewards = [result.reward if result is not None else 0.0 for _, result in turns]
        episode_id = uuid.uuid4().hex
        steps = []
        seen_turns = 0
        states = getattr(self, "turn_states", [None] * len(turns))
        for (experience, _), own_reward, state in zip(turns, step_rewards, states):
            if experience.info.get("model_turns", seen_turns + 1) == seen_turns:
                continue  # the context was full before this turn: nothing new was sampled
            seen_turns = experience.info.get("model_turns", seen_turns + 1)
            view = last_turn_view(experience)
            # final: r_k = sum of the episode's step rewards, for every step k
            view.reward = sum(step_rewards) if propagation == "final" else own_reward
            view.episode_id = episode_id
            view.info["step_reward"] = own_reward
            if state is not None:
                view.info["env_state_hash"] = state
            self.fill(view, turns)
            steps.append(view)
        return steps


def last_turn_view(experience: Experience) -> Experience:
    """The latest model turn as the response, everything before it as the prompt.

    tokens (T,) unchanged; prompt_length moves to where the last run of model tokens starts.
    """
    import torch  # here: validating a config imports this module and must not load torch

    mask = experience.action_mask
    starts = [i for i in range(mask.numel()) if mask[i] and (i == 0 or not mask[i - 1])]
    start = starts[-1] if starts else mask.numel()
    return replace(
        experience,
        prompt_length=experience.prompt_length + start,
        logprobs=None if experience.logprobs is None else experience.logprobs[start:].clone(),
        action_mask=torch.ones(mask.numel() - start, dtype=torch.bool),
        response_text=latest_reply(experience),
        info=dict(experience.info),
        metrics=dict(experience.metrics),
        eid=uuid.uuid4().hex,
    )
