"""Validation rules for the ``algorithm`` section of a resolved config.

Owns: preset constraints (group size, train-only algorithms), the names of the algorithm
functions and the keys of their ``*_fn_args``, and ``sample_strategy_args``. A mode that only
evaluates (``mode: bench``) trains nothing, so none of these rules apply to it. Like ``validate.py``, nothing here
derives values; resolve() has already filled every ``*_fn`` from the preset.

Function names are looked up in the registries of ``trivium.algorithm``, so plugins must be
imported (``--plugin-dir``) before validation for their names to be known. A dotted path
(``my_pkg.losses:my_loss``) is never an error here: it may only be importable where the run
executes; when it imports, its arguments are checked like a built-in's.
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from trivium.algorithm.presets import PRESETS
from trivium.algorithm.sample_strategies import SAMPLE_STRATEGIES
from trivium.config.errors import Problem, Suggestion
from trivium.config.modes import TRAINING_MODES, traits_of
from trivium.config.schema import TriviumConfig
from trivium.core.storage_kinds import kinds_with, storage_kind
from trivium.errors import UserError

STALENESS_MODES = ("drop", "downweight")


def is_dotted_path(name: str) -> bool:
    """``pkg.module:Name`` or ``pkg.module.Name``: a plugin imported by path, not a registered name."""
    return "." in name or ":" in name


def check_algorithm(config: TriviumConfig, problems: list[Problem]) -> None:
    """Every rule of this module; a mode that only evaluates models skips them all."""
    if traits_of(config.mode).evaluates_only:
        return
    _check_preset(config, problems)
    _check_functions(config, problems)
    _check_sample_strategy(config, problems)
    _check_decoupled_objective(config, problems)
    _check_engine_logprobs(config, problems)


# ---------------------------------------------------------------- presets


def _check_preset(config: TriviumConfig, problems: list[Problem]) -> None:
    algorithm = config.algorithm
    preset = PRESETS[algorithm.algorithm_type]
    if preset.group_based and algorithm.repeat_times < preset.min_repeat_times:
        problems.append(Problem(
            "algorithm.repeat_times",
            f"{algorithm.algorithm_type} compares several responses per task, so it needs repeat_times >= 2 "
            f"(got {algorithm.repeat_times}); 8 is a common choice",
        ))
    if preset.needs_rollout_logprobs and config.trainer.old_logprobs_source != "engine":
        problems.append(Problem(
            "algorithm.bypass_old_logprobs",
            f"{algorithm.algorithm_type} compares the policy that sampled each token with the current one, so its "
            "old logprobs are the rollout engine's: leave algorithm.bypass_old_logprobs unset (or true) and "
            f"trainer.old_logprobs_source at auto or engine (got {config.trainer.old_logprobs_source!r})",
        ))
    if preset.needs_teacher_logprobs and traits_of(config.mode).explores \
            and not config.explorer.auxiliary_models:
        problems.append(Problem(
            "explorer.auxiliary_models",
            f"{algorithm.algorithm_type} distils from a teacher that scores every rollout: add the teacher model "
            "here (the first auxiliary model is the teacher)",
        ))
    if not preset.train_only:
        return
    if not traits_of(config.mode).trains_only:
        problems.append(Problem(
            "mode",
            f"algorithm.algorithm_type '{algorithm.algorithm_type}' trains from a dataset and runs only with "
            f"mode: train (got mode: {config.mode})",
        ))
    buffer = config.buffer.trainer_input.experience_buffer
    if preset.reads_raw_text and buffer.format.prompt_type != "raw":
        problems.append(Problem(
            "buffer.trainer_input.experience_buffer.format.prompt_type",
            f"{algorithm.algorithm_type} trains on raw text rows: set prompt_type: raw (the text in prompt_key), "
            f"got {buffer.format.prompt_type}",
        ))
    if not storage_kind(buffer.storage_type).holds_datasets or not buffer.path:
        problems.append(Problem(
            "buffer.trainer_input.experience_buffer",
            f"{algorithm.algorithm_type} reads its training data from here: set storage_type: "
            f"{' or '.join(kinds_with('holds_datasets'))} and path to the dataset",
        ))


# ---------------------------------------------------------------- functions and their arguments


def _registries() -> dict[str, Any]:
    # Imported here: the registries pull in torch, which loading a config must not need.
    from trivium.algorithm import ADVANTAGE_FNS, ENTROPY_LOSS_FNS, KL_FNS, POLICY_LOSS_FNS

    return {
        "advantage_fn": ADVANTAGE_FNS, "policy_loss_fn": POLICY_LOSS_FNS, "kl_penalty_fn": KL_FNS,
        "kl_loss_fn": KL_FNS, "entropy_loss_fn": ENTROPY_LOSS_FNS,
    }


def _lookup(registry: Any, name: str, key: str, problems: list[Problem]) -> Callable[..., Any] | None:
    """The registered function, or None when unknown (a Problem) or a dotted path that does not import."""
    if name in registry:
        return registry.get(name)
    if is_dotted_path(name):
        return _import_or_none(name)
    try:
        registry.get(name)
    except KeyError as error:  # RegistryError: message has the closest name and the known ones
        problems.append(Problem(key, str(error)))
    return None


def _import_or_none(path: str) -> Callable[..., Any] | None:
    from trivium.registry import import_object

    try:
        return import_object(path)
    except Exception:  # noqa: BLE001 - any import failure means "check it where it runs"
        return None


def _check_functions(config: TriviumConfig, problems: list[Problem]) -> None:
    algorithm = config.algorithm
    functions = {
        name: _lookup(registry, getattr(algorithm, name), f"algorithm.{name}", problems)
        for name, registry in _registries().items()
        if getattr(algorithm, name) is not None
    }
    # The trainer passes these argument mappings to the functions as keyword arguments.
    for name in ("advantage_fn", "policy_loss_fn"):
        if functions.get(name) is not None:
            _check_fn_args(functions[name], getattr(algorithm, f"{name}_args"), f"algorithm.{name}_args", problems)
    if algorithm.policy_loss_fn == "mix":
        _check_mix_inner_loss(algorithm.policy_loss_fn_args, problems)
    required_mode = getattr(functions.get("policy_loss_fn"), "required_loss_agg_mode", None)
    if required_mode is not None and algorithm.loss_agg_mode != required_mode:
        problems.append(Problem(
            "algorithm.loss_agg_mode",
            f"policy_loss_fn '{algorithm.policy_loss_fn}' is defined with loss_agg_mode: {required_mode} "
            f"(got {algorithm.loss_agg_mode}); set it to {required_mode}",
        ))
    # The trainer reads only the coefficients of the KL and entropy terms (and the penalty's controller).
    for name in ("kl_penalty_fn", "kl_loss_fn"):
        _check_kl_args(f"algorithm.{name}_args", getattr(algorithm, f"{name}_args"), problems)
    entropy_args = algorithm.entropy_loss_fn_args
    entropy_fn = functions.get("entropy_loss_fn")
    allowed = {"entropy_coef"} | (set(_tunable_args_or_none(entropy_fn)) if entropy_fn else set())
    _check_allowed_keys("algorithm.entropy_loss_fn_args", entropy_args, sorted(allowed), problems)
    _check_number("algorithm.entropy_loss_fn_args.entropy_coef", entropy_args.get("entropy_coef"), problems)


KL_ARGS = ["kl_coef", "adaptive", "target_kl", "horizon"]


def _check_kl_args(key: str, args: Mapping[str, Any], problems: list[Problem]) -> None:
    """kl_coef >= 0; ``adaptive: true`` needs target_kl and horizon, both > 0 (Trinity-RFT's KL arguments)."""
    _check_allowed_keys(key, args, KL_ARGS, problems)
    _check_number(f"{key}.kl_coef", args.get("kl_coef"), problems, minimum=0)
    adaptive = args.get("adaptive", False)
    if not isinstance(adaptive, bool):
        problems.append(Problem(f"{key}.adaptive", f"expected true or false, got {adaptive!r}"))
        return
    for name in ("target_kl", "horizon"):
        value = args.get(name)
        _check_number(f"{key}.{name}", value, problems)
        if adaptive and value is None:
            problems.append(Problem(f"{key}.{name}", "adaptive KL needs target_kl and horizon; set both"))
        elif isinstance(value, numbers.Real) and not isinstance(value, bool) and value <= 0:
            problems.append(Problem(f"{key}.{name}", f"must be greater than 0, got {value}"))


def _check_decoupled_objective(config: TriviumConfig, problems: list[Problem]) -> None:
    """The decoupled objective weights each token's advantage: it needs rollouts and a loss that scales with A."""
    from trivium.algorithm import POLICY_LOSS_FNS
    from trivium.algorithm.policy_losses import scales_with_advantage

    if config.trainer.old_logprobs_source != "decoupled":
        if config.trainer.behaviour_weight_range is not None:
            problems.append(Problem(
                "trainer.behaviour_weight_range",
                f"masks tokens by pi_proximal / pi_engine, which only old_logprobs_source 'decoupled' computes "
                f"(it is '{config.trainer.old_logprobs_source}'): set old_logprobs_source: decoupled or remove it",
            ))
        return
    algorithm = config.algorithm
    if not PRESETS[algorithm.algorithm_type].learns_from_rollouts:
        problems.append(Problem(
            "trainer.old_logprobs_source",
            f"'decoupled' weights rollouts by pi_proximal / pi_engine; algorithm '{algorithm.algorithm_type}' "
            "trains on a dataset, which has no engine logprobs: use auto",
        ))
        return
    name = algorithm.policy_loss_fn
    fn = POLICY_LOSS_FNS.get(name) if name and name in POLICY_LOSS_FNS.names() else None
    if fn is not None and not scales_with_advantage(fn):
        problems.append(Problem(
            "trainer.old_logprobs_source",
            f"'decoupled' multiplies each token's advantage by pi_proximal / pi_engine, which is exact only for "
            f"losses that scale with the advantage (ppo); algorithm.policy_loss_fn is '{name}': use ppo or "
            "old_logprobs_source auto",
        ))
    cap = config.trainer.behaviour_weight_cap
    if cap is not None and cap <= 0:
        problems.append(Problem("trainer.behaviour_weight_cap", f"must be greater than 0 or null, got {cap}"))
    kept = config.trainer.behaviour_weight_range
    if kept is not None and (len(kept) != 2 or not 0 <= kept[0] < kept[1]):
        problems.append(Problem(
            "trainer.behaviour_weight_range", f"must be [low, high] with 0 <= low < high, or null; got {list(kept)}"
        ))


def _check_engine_logprobs(config: TriviumConfig, problems: list[Problem]) -> None:
    """Old logprobs taken from the rollout engine need rollouts: a dataset row has no engine logprobs."""
    algorithm = config.algorithm
    trained_on_rollouts = PRESETS[algorithm.algorithm_type].learns_from_rollouts
    if config.trainer.old_logprobs_source != "engine" or trained_on_rollouts:
        return
    key = "algorithm.bypass_old_logprobs" if algorithm.bypass_old_logprobs else "trainer.old_logprobs_source"
    problems.append(Problem(
        key,
        f"takes the old logprobs from the rollout engine, but algorithm '{algorithm.algorithm_type}' trains "
        "on a dataset, whose rows carry no engine logprobs: remove it (the trainer then computes them)",
    ))


def _check_mix_inner_loss(args: Mapping[str, Any], problems: list[Problem]) -> None:
    """The mix loss wraps an RL loss named by ``rl_loss_fn`` and configured by ``rl_loss_fn_args``."""
    from trivium.algorithm import POLICY_LOSS_FNS

    inner_name = args.get("rl_loss_fn", "ppo")
    key = "algorithm.policy_loss_fn_args.rl_loss_fn"
    if not isinstance(inner_name, str) or inner_name == "mix":
        problems.append(Problem(key, f"must name another policy loss (e.g. ppo), got {inner_name!r}"))
        return
    inner_fn = _lookup(POLICY_LOSS_FNS, inner_name, key, problems)
    inner_args = args.get("rl_loss_fn_args") or {}
    args_key = "algorithm.policy_loss_fn_args.rl_loss_fn_args"
    if not isinstance(inner_args, Mapping):
        problems.append(Problem(args_key, f"expected a mapping of arguments, got {inner_args!r}"))
    elif inner_fn is not None:
        _check_fn_args(inner_fn, inner_args, args_key, problems)


def _tunable_args_or_none(fn: Callable[..., Any]) -> dict[str, Any]:
    from trivium.algorithm import tunable_args

    try:
        return tunable_args(fn)
    except (TypeError, ValueError):  # no inspectable signature (e.g. a C function)
        return {}


def _check_fn_args(fn: Callable[..., Any], args: Mapping[str, Any], key: str, problems: list[Problem]) -> None:
    """check_fn_args raises UserError("<key>: <message>") for the first unknown name; keep it as a Problem."""
    from trivium.algorithm import check_fn_args

    try:
        check_fn_args(fn, args, key=key)
    except UserError as error:
        problems.append(Problem(key, str(error).removeprefix(f"{key}: ")))
    except (TypeError, ValueError):  # a plugin without an inspectable signature: checked when it runs
        pass


def _check_allowed_keys(key: str, args: Mapping[str, Any], allowed: list[str], problems: list[Problem]) -> None:
    for name in args:
        if name in allowed:
            continue
        close = difflib.get_close_matches(str(name), allowed, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        problems.append(Problem(key, f"unknown argument '{name}'.{hint} Valid arguments: {', '.join(allowed)}."))


def _check_number(key: str, value: Any, problems: list[Problem], minimum: float | None = None,
                  below: float | None = None, integer: bool = False) -> None:
    """A present ``value`` must be a number (an integer if asked) in [minimum, below)."""
    if value is None:
        return
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        problems.append(Problem(key, f"expected {'an integer' if integer else 'a number'}, got {value!r}"))
    elif minimum is not None and below is not None and not minimum <= value < below:
        problems.append(Problem(key, f"must be in [{minimum}, {below}), got {value}"))
    elif minimum is not None and value < minimum:
        problems.append(Problem(key, f"must be at least {minimum}, got {value}"))


# ---------------------------------------------------------------- sample strategy


def _check_sample_strategy(config: TriviumConfig, problems: list[Problem]) -> None:
    algorithm = config.algorithm
    strategy, args = algorithm.sample_strategy, algorithm.sample_strategy_args
    key = "algorithm.sample_strategy_args"
    traits = SAMPLE_STRATEGIES.get(strategy)
    if traits is None:
        return  # an unknown name is the schema's choice check's to report
    if traits.defaults:
        _check_allowed_keys(key, args, list(traits.defaults), problems)
    if traits.controls_staleness:
        _check_number(f"{key}.max_staleness", args.get("max_staleness"), problems, minimum=0, integer=True)
        mode = args.get("mode")
        if mode is not None and mode not in STALENESS_MODES:
            close = difflib.get_close_matches(str(mode), STALENESS_MODES, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            problems.append(Problem(f"{key}.mode", f"invalid value {mode!r}; choose one of: drop, downweight.{hint}"))
    elif traits.mixes_expert_data:
        _check_number(f"{key}.expert_data_ratio", args.get("expert_data_ratio"), problems, minimum=0, below=1)
        if config.mode in TRAINING_MODES and not config.buffer.trainer_input.auxiliary_buffers:
            problems.append(Problem(
                "buffer.trainer_input.auxiliary_buffers",
                "algorithm.sample_strategy 'mix' mixes expert rows into every batch: add the expert dataset "
                "here (e.g. auxiliary_buffers.sft_dataset with storage_type: file and a path)",
            ))
    elif args and not traits.defaults:
        problems.append(Problem(
            key,
            f"sample_strategy '{strategy}' takes no arguments, got {', '.join(map(str, args))}; set "
            "algorithm.sample_strategy to the strategy they belong to (staleness_control or mix) or remove them",
        ))


# ---------------------------------------------------------------- notes


def algorithm_notes(config: TriviumConfig) -> list[Suggestion]:
    """Dotted-path functions that cannot be imported here are checked only when the run starts."""
    if traits_of(config.mode).evaluates_only:
        return []
    notes = []
    from trivium.algorithm.arguments import accepted_unused_args

    loss_name = config.algorithm.policy_loss_fn
    registry = _registries()["policy_loss_fn"]
    if loss_name in registry:
        for arg in accepted_unused_args(registry.get(loss_name)):
            if arg in config.algorithm.policy_loss_fn_args:
                notes.append(Suggestion(
                    f"algorithm.policy_loss_fn_args.{arg}", "accepted but unused: Trinity-RFT's loss no longer reads it",
                    "unused",
                ))
    for arg in ("adaptive", "target_kl", "horizon"):
        if arg in config.algorithm.kl_loss_fn_args:
            notes.append(Suggestion(
                f"algorithm.kl_loss_fn_args.{arg}",
                "accepted but unused: the adaptive controller moves the KL penalty's coefficient, never the "
                "KL loss's (as in Trinity-RFT)",
                "unused",
            ))
    for name in _registries():
        value = getattr(config.algorithm, name)
        if value and is_dotted_path(value) and _import_or_none(value) is None:
            notes.append(Suggestion(
                f"algorithm.{name}",
                f"'{value}' cannot be imported here, so its arguments were not checked; it must be importable "
                "where the run executes",
                "note",
            ))
    return notes
