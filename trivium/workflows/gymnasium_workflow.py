"""The ``gymnasium`` workflow: play an environment of the ``gymnasium`` package through text.

A task names the environment (``env_id``), its ``gymnasium.make`` keyword arguments
(``env_kwargs``) and the reset ``seed``, as row columns or as ``workflow_args``; a row's
column wins, and ``env_kwargs`` merge key by key (the row's keys win), so ``workflow_args``
hold a taskset's defaults. Each turn the adapter of ``trivium.envs.gymnasium_text``
renders the state as the user message and reads the reply as an action; ``env.step`` runs
it. The multi-turn loop makes the episode one token sequence.

Reward: the environment's undiscounted return, the plain sum of its step rewards (no
shaping, no scaling). A reply that names no action ends the episode there; that turn adds
``workflow_args.invalid_reply_reward`` (default 0) to the return so far. Metrics: ``accuracy`` (the adapter's success rule),
``return``, ``invalid_replies``, ``illegal_actions`` (actions the env's ``action_mask`` ruled
out; gymnasium still applies them), ``actions_taken`` (``env.step`` calls), ``env_steps``
(turns answered), ``truncated`` (ended with no terminal state and no invalid reply: the
env's time limit, ``max_env_steps`` or a full context).
"""

from __future__ import annotations

from typing import Any

from trivium.envs.gymnasium_text import adapter_for, make_env, read_env_kwargs
from trivium.errors import UserError
from trivium.workflows.multi_turn import EnvStep, MultiTurnEnvWorkflow, StepWiseRewardWorkflow
from trivium.workflows.prompting import system_prompt_for, with_system_prompt
from trivium.workflows.registry import register_builtin

EPISODE_KEYS = ("env_id", "env_kwargs", "seed")
POLICY_KEYS = ("invalid_reply_reward",)


class GymnasiumGame:
    """The environment half shared by the episode-level and step-wise workflows."""

    episode_arg_names = EPISODE_KEYS + POLICY_KEYS
    # Read by the configuration rules: a run is refused before it starts when this is missing.
    environment = "gymnasium"
    required_package = "gymnasium"
    install_hint = "pip install gymnasium (or trivium's `envs` extra)"

    def reset(self) -> list[dict]:
        where = f"gymnasium task {self.task.index} of taskset '{self.task.taskset_name}'"
        env_id, env_kwargs, seed = episode_spec(self.task.raw, self.workflow_args, where)
        self.adapter = adapter_for(env_id)
        self.env = make_env(env_id, env_kwargs, where)
        observation, self.info = self.env.reset(seed=seed)
        self.episode_return, self.terminated, self.invalid_reply = 0.0, False, False
        self.invalid_reply_reward = invalid_reply_reward(self.workflow_args)
        system_prompt = system_prompt_for(self.task, self.workflow_args, self.adapter.instructions)
        return with_system_prompt(system_prompt, self.adapter.render(self.env, observation))

    def step(self, reply: str) -> EnvStep:
        action = self.adapter.parse(reply)
        if action is None:
            self.invalid_reply = True
            return EnvStep(
                None,
                self.invalid_reply_reward,
                True,
                {"invalid_replies": 1.0, "illegal_actions": 0.0, "actions_taken": 0.0},
            )
        mask = self.info.get("action_mask")
        illegal = mask is not None and not mask[action]
        observation, reward, terminated, truncated, self.info = self.env.step(action)
        self.episode_return += float(reward)
        self.terminated = bool(terminated)
        done = bool(terminated or truncated)
        return EnvStep(
            observation=None if done else self.adapter.render(self.env, observation),
            reward=float(reward),
            done=done,
            metrics={"invalid_replies": 0.0, "illegal_actions": float(illegal), "actions_taken": 1.0},
        )

    def episode_metrics(self) -> dict[str, float]:
        return {
            "accuracy": float(self.adapter.succeeded(self.episode_return, self.terminated)),
            "return": self.episode_return,
            "truncated": float(not self.terminated and not self.invalid_reply),
        }


def invalid_reply_reward(workflow_args: dict[str, Any]) -> float:
    value = workflow_args.get("invalid_reply_reward", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"workflow_args.invalid_reply_reward must be a number (e.g. -1), got {value!r}")
    return float(value)


def episode_spec(
    row: dict[str, Any], workflow_args: dict[str, Any], where: str
) -> tuple[str, dict, int | None]:
    """``(env_id, env_kwargs, seed)``: the row's columns over ``workflow_args``'s defaults."""
    env_id = row.get("env_id", workflow_args.get("env_id"))
    if not env_id:
        raise UserError(
            f"{where} names no environment: give the row an 'env_id' column or set workflow_args.env_id "
            "(e.g. FrozenLake-v1)."
        )
    env_kwargs = {
        **read_env_kwargs(workflow_args.get("env_kwargs"), f"{where}, workflow_args"),
        **read_env_kwargs(row.get("env_kwargs"), where),
    }
    seed = row.get("seed", workflow_args.get("seed"))
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise UserError(f"{where}: seed must be a non-negative integer (or absent), got {seed!r}")
    return str(env_id), env_kwargs, seed


@register_builtin("gymnasium")
class GymnasiumWorkflow(GymnasiumGame, MultiTurnEnvWorkflow):
    """One experience per episode."""


@register_builtin("gymnasium_step_wise")
class GymnasiumStepWiseWorkflow(GymnasiumGame, StepWiseRewardWorkflow):
    """One experience per model turn."""
