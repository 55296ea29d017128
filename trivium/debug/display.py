"""Printing experiences for a person reading a terminal: one panel per experience.

Owns layout only: prompt and response text, reward, token counts, logprob summary,
metrics and info. Nothing is computed here that the experience does not already hold.
"""

from __future__ import annotations

import json
from typing import Any

from trivium.core.experience import Experience


def experience_summary(experience: Experience) -> str:
    """One line: run id, reward, lengths, finish reason, model version, mean logprob."""
    reward = "-" if experience.reward is None else f"{experience.reward:.4g}"
    parts = [
        f"run {experience.run_id}",
        f"reward {reward}",
        f"prompt {experience.prompt_length} + response {experience.response_length} tokens",
        f"finish {experience.info.get('finish_reason', '?')}",
        f"model version {experience.model_version}",
    ]
    if experience.logprobs is not None and experience.logprobs.numel() > 0:
        parts.append(f"mean logprob {experience.logprobs.float().mean().item():.3f}")
    if experience.prompt_truncated:
        parts.append("prompt TRUNCATED")
    return " | ".join(parts)


def _json_line(values: dict[str, Any]) -> str:
    return json.dumps(values, ensure_ascii=False, default=str, sort_keys=True)


def print_experiences(experiences: list[Experience], console: Any = None) -> None:
    from rich.console import Console, Group
    from rich.panel import Panel
    from rich.text import Text

    console = console or Console(highlight=False)
    for position, experience in enumerate(experiences, start=1):
        body = [
            Text(experience_summary(experience), style="dim"),
            Text("prompt", style="bold cyan"),
            Text(experience.prompt_text or "(no prompt text)"),
            Text("response", style="bold green"),
            Text(experience.response_text or "(empty response)"),
        ]
        if experience.metrics:
            body += [Text("metrics", style="bold"), Text(_json_line(experience.metrics))]
        info = {key: value for key, value in experience.info.items() if key != "finish_reason"}
        if info:
            body += [Text("info", style="bold"), Text(_json_line(info))]
        title = f"experience {position}/{len(experiences)} - task {experience.task_id or '?'}"
        console.print(Panel(Group(*body), title=title, expand=True))
    rewards = [e.reward for e in experiences if e.reward is not None]
    if rewards:
        console.print(
            f"{len(experiences)} experience(s); reward mean {sum(rewards) / len(rewards):.4g}, "
            f"min {min(rewards):.4g}, max {max(rewards):.4g}"
        )
    else:
        console.print(f"{len(experiences)} experience(s); none has a reward")
