"""Turning settings (and the buffer's typed sections) into components.

Engines and wrappers are built from their typed settings (``trivium.explorer.settings``);
runner pools, taskset readers and buffers from the schema sections the buffer package
consumes. The loops in ``trivium.runtime`` never look at the config.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from trivium.core.keyword_fields import keyword_fields
from trivium.explorer.dynamic_timeout import DynamicTimeout
from trivium.explorer.explorer import EvalSet, Explorer
from trivium.explorer.runner import RunnerPool
from trivium.explorer.settings import EngineSettings, ExplorerSettings, WrapperSettings
from trivium.models.engine.busy_clients import BusyClients
from trivium.runtime.settings import RunSettings


# ---------------------------------------------------------------- engines and model wrappers
def trainer_class(settings: Any) -> type:
    """The trainer for ``TrainerSettings``: on a Tinker service, or here with PyTorch."""
    if settings.tinker is not None:
        from trivium.tinker_client.trainer import TinkerTrainer

        return TinkerTrainer
    from trivium.trainer.trainer import Trainer

    return Trainer


def build_engines(engine: EngineSettings) -> list[Any]:
    from trivium.models.engine import create_engine

    return [create_engine(engine.engine_type, **engine.factory_kwargs(index)) for index in range(engine.count)]


def build_wrapper(wrapper: WrapperSettings, engine: Any) -> Any:
    from trivium.models.wrapper import ModelWrapper

    # The settings are named as ModelWrapper's arguments, but for how the explorer serves it
    # (enable_openai_api) and whether replies are parsed into tool calls at all.
    arguments = keyword_fields(wrapper, leave_out=("enable_openai_api", "enable_auto_tool_choice"))
    if not wrapper.enable_auto_tool_choice:
        arguments["tool_call_parser"] = None
    return ModelWrapper(engine, **arguments)


def build_wrappers(wrapper: WrapperSettings, engines: list[Any]) -> list[Any]:
    return [build_wrapper(wrapper, engine) for engine in engines]


def build_auxiliary_wrappers(explorer: ExplorerSettings) -> list[Any]:
    return [
        build_wrapper(wrapper, build_engines(engine)[0])
        for engine, wrapper in zip(explorer.auxiliary, explorer.auxiliary_wrappers)
    ]


# ---------------------------------------------------------------- explorer
def build_workflow_api(settings: RunSettings, wrappers: list[Any], auxiliary: list[Any]) -> Any:
    """The HTTP endpoints of the models whose settings ask for one (``enable_openai_api``); None when none do."""
    explorer = settings.explorer
    served = list(wrappers) if explorer.wrapper.enable_openai_api else []
    served += [wrapper for wrapper, own in zip(auxiliary, explorer.auxiliary_wrappers) if own.enable_openai_api]
    if not served:
        return None
    from trivium.explorer.workflow_api import WorkflowApi

    return WorkflowApi(served, host=explorer.serve.listen_address, api_key=explorer.serve.api_key)


def build_runner_pool(
    settings: RunSettings, wrappers: list[Any], auxiliary: list[Any], workflow_api: Any = None
) -> RunnerPool:
    from trivium.monitor.logs import setup_component_logger
    from trivium.workflows.registry import WORKFLOWS

    runners = settings.explorer.runners
    for key, value in runners.env_vars.items():
        os.environ[str(key)] = str(value)
    num_runners = max(1, runners.runner_per_model) * len(wrappers)
    loggers = [
        setup_component_logger(settings.run_dir, f"explorer_runner_{i}", settings.log.level, settings.log.group_by_node)
        for i in range(num_runners)
    ]

    busy = BusyClients()
    for wrapper in [*wrappers, *auxiliary]:
        wrapper.share_busy_clients(busy)

    def view(wrapper: Any, **options: Any) -> Any:
        # Each workflow has its own history (and, with enable_openai_api, its own session URL).
        own = wrapper.for_workflow(**options)
        return workflow_api.bind(wrapper, own) if workflow_api is not None else own

    def make_workflow(task, runner_id: int):
        workflow_class = WORKFLOWS.get(task.workflow)
        return workflow_class(
            task=task,
            # The taskset's chat settings (format.enable_thinking, reply_prefix) apply to the policy's calls.
            model=view(
                wrappers[runner_id % len(wrappers)],
                enable_thinking=task.format.get("enable_thinking"), reply_prefix=task.format.get("reply_prefix"),
            ),
            auxiliary_models=[view(wrapper) for wrapper in auxiliary],
            logger=loggers[runner_id % len(loggers)],
        )

    return RunnerPool(
        make_workflow=make_workflow,
        num_runners=num_runners,
        # Token ids the model cannot have produced are refused at the door.
        vocab_size=getattr(wrappers[0].engine, "vocab_size", None) if wrappers else None,
        concurrent_mode=runners.concurrent_mode,
        max_timeout=runners.max_timeout,
        max_retry_times=runners.max_retry_times,
        runner_loggers=loggers,
        logger=logging.getLogger("trivium.explorer"),
        busy=busy,
        dynamic_timeout=(
            DynamicTimeout(ratio=runners.dynamic_timeout_ratio, max_timeout=runners.max_timeout)
            if runners.dynamic_timeout_ratio is not None
            else None
        ),
    )


def build_taskset_reader(settings: RunSettings) -> Any:
    from trivium.buffer.task_reader import MultiTasksetReader, TaskReader

    explorer = settings.explorer
    readers = [
        TaskReader(
            taskset,
            total_epochs=settings.total_epochs,
            total_steps=explorer.buffer_total_steps,
            default_seed=settings.seed,
            task_pipeline=build_task_pipeline(explorer),
        )
        for taskset in explorer.tasksets
    ]
    if not readers:
        return None
    return readers[0] if len(readers) == 1 else MultiTasksetReader(readers)


def build_eval_sets(settings: RunSettings) -> list[EvalSet]:
    from trivium.buffer.task_reader import TaskReader

    def reader_of(taskset):
        return lambda: TaskReader(taskset, is_eval=True, total_epochs=1, default_seed=settings.seed)

    return [EvalSet(name=taskset.name, reader=None, make_reader=reader_of(taskset)) for taskset in settings.explorer.eval_tasksets]


def build_task_pipeline(explorer: ExplorerSettings) -> Any:
    from trivium.buffer.pipeline import TaskPipeline, pipeline_has_work

    pipeline = explorer.task_pipeline
    return TaskPipeline.from_pipeline_config(pipeline) if pipeline_has_work(pipeline) else None


def build_experience_pipeline(explorer: ExplorerSettings, run_dir: Any) -> Any:
    from trivium.buffer.pipeline import ExperiencePipeline, pipeline_has_work

    pipeline = explorer.experience_pipeline
    return ExperiencePipeline.from_pipeline_config(pipeline, run_dir) if pipeline_has_work(pipeline) else None


def connect_selector_feedback(pipeline: Any, taskset_reader: Any) -> Any:
    """An adaptive task selector learns from each group's pass rate: the experience pipeline's
    pass_rate_calculator (added with its defaults when the pipeline has none) reports to it."""
    if taskset_reader is None or not getattr(taskset_reader, "learns_from_pass_rate", False):
        return pipeline
    from trivium.buffer.operators import PassRateCalculator
    from trivium.buffer.pipeline import ExperiencePipeline

    pipeline = pipeline if pipeline is not None else ExperiencePipeline([])
    if not any(isinstance(operator, PassRateCalculator) for operator in pipeline.operators):
        pipeline.operators.append(PassRateCalculator())
    pipeline.connect_pass_rate(taskset_reader.update_pass_rate)
    return pipeline


def build_explorer(
    settings: RunSettings, *, taskset_reader: Any, writer: Any, pool: RunnerPool, version_fn, auxiliary: list[Any]
) -> Explorer:
    explorer = settings.explorer
    return Explorer(
        taskset_reader=taskset_reader,
        writer=writer,
        runner_pool=pool,
        eval_runner_pool=pool,
        batch_size=explorer.batch_size,
        max_steps=explorer.step_limit,
        eval_sets=build_eval_sets(settings),
        experience_pipeline=connect_selector_feedback(
            build_experience_pipeline(explorer, settings.run_dir), taskset_reader
        ),
        advantage_fn=explorer.group_advantage_fn,
        advantage_fn_args=dict(explorer.advantage_fn_args),
        max_repeat_times_per_runner=explorer.runners.max_repeat_times_per_runner,
        over_rollout=explorer.over_rollout,
        max_failed_steps=explorer.runners.max_failed_steps,
        model_version=version_fn,
        logger=logging.getLogger("trivium.explorer"),
        greedy_baseline=explorer.greedy_baseline,
        # The teacher of distillation presets is the first auxiliary model.
        teacher=auxiliary[0] if explorer.uses_teacher else None,
    )


def build_train_reader(settings: RunSettings, tokenizer: Any) -> Any:
    """The trainer's input: a dataset (train mode from a file), the experience buffer, and
    expert data mixed in when the sample strategy asks for it."""
    from trivium.buffer.factory import create_reader
    from trivium.trainer.sample_strategy import MixSampler

    inputs = settings.trainer_input
    storage = inputs.experience_buffer
    if settings.reads_dataset:
        return create_reader(storage, tokenizer=tokenizer, total_epochs=settings.total_epochs)
    reader = create_reader(storage)
    if not inputs.mixes_expert_data:
        return reader
    # validate() refuses 'mix' without an auxiliary buffer (config/algorithm_rules.py)
    auxiliary = dict(inputs.auxiliary_buffers)
    expert_config = auxiliary.get("sft_dataset") or next(iter(auxiliary.values()))
    expert = create_reader(expert_config, tokenizer=tokenizer, default_seed=settings.seed)
    return MixSampler(reader, expert, inputs.expert_data_ratio)
