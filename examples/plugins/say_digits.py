"""Say the digits: a three-turn game written as a plugin workflow.

Run it with
    trivium run --config examples/plugins/say_digits.yaml --plugin-dir examples/plugins

``--plugin-dir`` imports every ``.py`` file of the folder; the decorator below registers the
class under the name the config's ``default_workflow_type`` uses.

Each task row has a ``digits`` column (``"4 1 7"``). The environment asks for the digits one
at a time ("Say 4."), and the model answers each in a turn of its own. ``self.model.chat``
continues the exact token sequence of the episode when it is sent the conversation back, so
the experience of the last turn is the whole episode: the first prompt, every reply
(trained), and the environment's messages in between (not trained). ``run`` returns that one
experience with its reward (the share of digits said right) and metrics; the runner fills in
``task_id``, ``group_id`` and ``run_id``.
"""

from __future__ import annotations

from trivium.core.episode_turns import latest_reply
from trivium.core.experience import Experience
from trivium.workflows import WORKFLOWS, Workflow


@WORKFLOWS.register("say_digits")
class SayDigitsWorkflow(Workflow):
    # run() plays one episode; the runner calls it once per repeat (algorithm.repeat_times).
    can_repeat = False
    # The workflow_args keys it reads; any other key is an error when the run is planned.
    workflow_arg_names = ("max_turns",)

    def run(self) -> list[Experience]:
        digits = str(self.task.raw["digits"]).split()[: int(self.workflow_args.get("max_turns", 3))]
        sampling = {key: value for key, value in self.task.rollout_args.items() if key != "n"}
        messages = [{"role": "user", "content": f"Say {digits[0]}."}]
        said_right = 0
        for turn, digit in enumerate(digits):
            (episode,) = self.model.chat(messages, **sampling)
            if episode.episode_truncated:  # the context is full: the episode ends here
                break
            reply = latest_reply(episode)  # this turn's reply; episode.response_text holds every turn
            said_right += reply.strip() == digit
            if turn + 1 < len(digits):
                messages += [
                    {"role": "assistant", "content": reply},  # sent back unchanged: the sequence continues
                    {"role": "user", "content": f"Say {digits[turn + 1]}."},
                ]
        episode.reward = said_right / len(digits)
        episode.metrics["accuracy"] = float(said_right == len(digits))
        return [episode]
