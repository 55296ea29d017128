"""The configuration schema: every key, its type, default, allowed values and help text.

This module is the single source of those facts. Loading, validation, ``trivium plan``,
``--help`` and ``docs/configuration.md`` all read them from here; nothing else repeats them.
It holds plain dataclasses only (OmegaConf structured-config compatible): no derived values,
no checks. Derived values are filled by ``trivium.config.resolve``; checks live in
``trivium.config.validate``.

Fields marked "(derived)" in their help are normally left unset: ``resolve()`` fills them.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from trivium.algorithm.aggregation import LOSS_AGG_MODES as AGGREGATION_MODES
from trivium.algorithm.sample_strategies import SAMPLE_STRATEGIES
from trivium.config.modes import MODE_TRAITS
from trivium.core.storage_kinds import STORAGE_KIND_NAMES

# Sentinel for keys a user must set (model.model_path). Kept as a value rather than
# OmegaConf's "???" so a missing value becomes our own clear error, not OmegaConf's.
REQUIRED = None


def opt(
    default: Any, help: str, choices: Optional[List[Any]] = None, required: bool = False,
    dotted_path: bool = False, unused: Optional[str] = None, unsupported: Optional[str] = None,
    engine_option: Optional[str] = None,
) -> Any:
    """A schema field: a default (mutable ones are copied per instance) and its help text.

    ``dotted_path`` also accepts, besides ``choices``, a plugin given as ``pkg.module:Name``.
    ``unused="why"``: accepted and stored, but nothing in trivium reads it; ``trivium plan``
    lists it when set. ``unsupported="why"``: setting it is an error saying why.
    ``engine_option="performance" | "behaviour" | "load"``: a rollout-engine option passed to
    the engine factory as a keyword; engines that cannot honour a behaviour option refuse it.
    """
    metadata = {"help": help}
    if unused is not None:
        metadata["unused"] = unused
    if unsupported is not None:
        metadata["unsupported"] = unsupported
    if engine_option is not None:
        metadata["engine_option"] = engine_option
    if choices is not None:
        # A list is kept as given: a registry's live list of names admits names registered later.
        metadata["choices"] = choices if isinstance(choices, list) else list(choices)
    if dotted_path:
        metadata["dotted_path"] = True
    if required:
        metadata["required"] = True
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def section(cls: type, help: str) -> Any:
    """A nested section, built with its own defaults."""
    return field(default_factory=cls, metadata={"help": help})


DATA_JUICER_IN_PROCESS = (
    "Data-Juicer runs in the explorer's process for the whole run, so no Data-Juicer server is started or "
    "contacted (py-data-juicer ships no server that processes datasets; its one server, dj-mcp, serves agents "
    "over the Model Context Protocol)"
)

MODES = list(MODE_TRAITS)
ALGORITHM_TYPES = [
    "ppo", "grpo", "opmd", "dpo", "sft", "mix", "rloo", "reinforceplusplus", "remax", "gspo", "cispo",
    "grpo_verl", "asymre", "topr", "sapo", "rec", "sppo", "raft", "mix_chord", "on_policy_distill", "jsd",
]
ALGORITHM_TYPES.append("multi_step_grpo")
ALGORITHM_TYPES.extend(["dapo", "gigpo", "m2po", "cpt"])
LR_SCHEDULERS = ["constant", "cosine"]
SAMPLE_STRATEGY_NAMES = [*SAMPLE_STRATEGIES, "warmup"]  # warmup: the reference's spelling of default
LOSS_AGG_MODES = list(AGGREGATION_MODES)
DTYPES = ["float32", "bfloat16", "float16", "auto"]
STORAGE_TYPES = STORAGE_KIND_NAMES  # file, queue, sql and any registered storage kind
PROMPT_TYPES = ["plaintext", "messages", "raw"]
SELECTOR_TYPES = ["sequential", "shuffle", "random", "difficulty", "difficulty_based"]
ENGINE_TYPES = ["auto", "hf", "vllm", "external", "tinker"]
CONCURRENT_MODES = ["sequential", "asynchronous", "multi-threading"]
SYNC_METHODS = ["nccl", "memory", "checkpoint"]
SYNC_STYLES = ["fixed", "explorer_driven", "trainer_driven", "fully_async"]
TRAINER_TYPES = ["default", "verl"]
OPTIMIZER_TYPES = ["adamw", "adam"]
TRAINER_STRATEGIES = ["fsdp", "fsdp2", "ddp", "megatron", "none"]
SAVE_STRATEGIES = ["single_thread", "single_process", "single_node", "unrestricted"]
SAVE_HF_CHOICES = ["last", "always", "never"]
TRUNCATION_CHOICES = ["mask", "keep"]
MONITOR_TYPES = ["none", "tensorboard", "wandb", "mlflow"]
PLACEMENTS = ["auto", "process", "ray"]
OLD_LOGPROBS_SOURCES = ["auto", "recompute", "engine", "decoupled"]
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]

# Why some keys of Trinity-RFT's configuration are accepted but not acted on.
ENGINE_PLACEMENT = "placement detail of Trinity-RFT's Ray engines"


# ---------------------------------------------------------------- algorithm


@dataclass
class OptimizerConfig:
    lr: float = opt(1e-6, "Learning rate of the policy (actor).")
    weight_decay: float = opt(0.01, "AdamW weight decay.")
    betas: List[float] = opt([0.9, 0.999], "AdamW (beta1, beta2).")
    lr_scheduler_type: str = opt("constant", "Learning-rate schedule after warm-up.", LR_SCHEDULERS)
    warmup_style: Optional[str] = opt(
        None, "Deprecated spelling of lr_scheduler_type; copied there with a warning.", LR_SCHEDULERS
    )
    lr_warmup_steps_ratio: float = opt(0.0, "Fraction of the training steps spent warming the rate up linearly.")
    lr_warmup_steps: Optional[int] = opt(None, "Warm-up steps; wins over lr_warmup_steps_ratio when set.")
    min_lr_ratio: float = opt(0.0, "Cosine schedule floor, as a fraction of lr.")
    optimizer_type: str = opt(
        "adamw", "Optimizer: AdamW (decoupled weight decay). 'adam', the reference configs' spelling, is read as "
        "AdamW too, the optimizer veRL's actor builds.", OPTIMIZER_TYPES,
    )
    clip_grad: float = opt(
        1.0, "Gradient norm clip; another spelling of trainer.grad_clip (copied there when only this one is set)."
    )


@dataclass
class AlgorithmConfig:
    algorithm_type: str = opt("ppo", "Algorithm preset; fills every *_fn left unset.", ALGORITHM_TYPES)
    repeat_times: int = opt(1, "Rollouts per task (the group size for group-based algorithms).")
    optimizer: OptimizerConfig = section(OptimizerConfig, "Optimizer of the policy.")
    sample_strategy: Optional[str] = opt(
        None, "How the trainer draws experiences from the buffer (preset default).", SAMPLE_STRATEGY_NAMES
    )
    sample_strategy_args: Dict[str, Any] = opt(
        {}, "Arguments of the sample strategy: staleness_control takes max_staleness (integer >= 0) and mode "
        "(drop or downweight); mix takes expert_data_ratio (in [0, 1)) and needs buffer.trainer_input."
        "auxiliary_buffers; default takes none ('warmup' is Trinity-RFT's deprecated name of default)."
    )
    advantage_fn: Optional[str] = opt(None, "Advantage estimator: a registered name or a dotted path (preset default).")
    advantage_fn_args: Dict[str, Any] = opt({}, "Arguments of the advantage estimator, e.g. gamma, lam.")
    policy_loss_fn: Optional[str] = opt(None, "Policy loss: a registered name or a dotted path (preset default).")
    policy_loss_fn_args: Dict[str, Any] = opt({}, "Arguments of the policy loss, e.g. clip ranges.")
    kl_penalty_fn: Optional[str] = opt(None, "KL penalty subtracted from the reward; 'none' disables it.")
    kl_penalty_fn_args: Dict[str, Any] = opt(
        {}, "Arguments of the KL penalty: kl_coef; adaptive: true lets the coefficient follow veRL's adaptive "
        "controller, which then needs target_kl and horizon (kl_coef *= 1 + clip(KL / target_kl - 1, -0.2, 0.2) "
        "* batch rows / horizon after every step)."
    )
    kl_loss_fn: Optional[str] = opt(None, "KL term added to the loss; 'none' disables it.")
    kl_loss_fn_args: Dict[str, Any] = opt(
        {}, "Arguments of the KL loss: kl_coef (adaptive, target_kl and horizon are accepted and, as in "
        "Trinity-RFT, leave the loss's coefficient fixed)."
    )
    entropy_loss_fn: Optional[str] = opt(None, "Entropy bonus in the loss; 'none' disables it.")
    entropy_loss_fn_args: Dict[str, Any] = opt(
        {}, "Arguments of the entropy term: entropy_coef, plus any the chosen function accepts."
    )
    loss_agg_mode: Optional[str] = opt(
        None, "How per-token losses are averaged (preset default). It also decides the policy loss's "
        "aggregation when policy_loss_fn_args gives a loss_agg_mode of its own (this key wins, as in "
        "Trinity-RFT).",
        LOSS_AGG_MODES,
    )
    bypass_old_logprobs: Optional[bool] = opt(
        None, "true: the old (behaviour) logprobs of the policy loss are the rollout engine's, stored with "
        "each experience, and the trainer computes none (trainer.old_logprobs_source: engine); false: the "
        "trainer computes them (old_logprobs_source auto, recompute or decoupled). Unset: "
        "old_logprobs_source decides.",
    )


# ---------------------------------------------------------------- model


@dataclass
class LoRAConfig:
    name: Optional[str] = opt(
        None, "Name of the adapter.",
        unused="the trainer trains one adapter, and the vllm engine names each version of it it serves after the "
        "weight version; no request chooses an adapter by name",
    )
    path: Optional[str] = opt(None, "Path of an existing adapter (saved by peft) to start from; its rank and alpha must match.")
    base_model_name: Optional[str] = opt(
        None, "Name of the base model the adapter belongs to.", unused="the base model is model.model_path"
    )
    lora_rank: int = opt(32, "Rank of the low-rank matrices.")
    lora_alpha: int = opt(32, "Scaling numerator of the adapter: its update is scaled by lora_alpha / lora_rank.")
    lora_dtype: str = opt("auto", "Data type of the adapter weights: auto (float32), float32, bfloat16 or float16.")
    lora_dropout: float = opt(0.0, "Dropout on the adapter's input while training (0 turns it off).")
    target_modules: Any = opt("all-linear", "Modules to adapt: 'all-linear' or a list of module names.")
    exclude_modules: Optional[str] = opt(None, "Modules never adapted (a regular expression over module names).")
    is_dummy: bool = opt(
        False, "A placeholder adapter used only to reserve engine slots.",
        unused="no placeholder adapter is needed: the vllm engine starts with LoRA enabled and serves the base "
        "model until the first sync loads the trained adapter",
    )


@dataclass
class TinkerConfig:
    enable: bool = opt(
        False,
        "Train a LoRA adapter on a Tinker service instead of local weights, and sample from it "
        "(engine_type tinker). The service is reached at TINKER_BASE_URL with TINKER_API_KEY, both "
        "from the environment.",
    )
    base_model: Optional[str] = opt(None, "The service's name of the model to adapt (default: model.model_path).")
    rank: int = opt(32, "LoRA rank of the adapter the service trains.")
    seed: Optional[int] = opt(None, "Seed of the adapter's initialisation on the service.")
    train_mlp: bool = opt(True, "Adapt the MLP layers.")
    train_attn: bool = opt(True, "Adapt the attention layers.")
    train_unembed: bool = opt(True, "Adapt the unembedding layer.")
    base_url: Optional[str] = opt(
        None, "URL of the Tinker service.",
        unsupported="the service's address comes from the environment: set TINKER_BASE_URL instead",
    )


@dataclass
class ExternalModelConfig:
    enable: bool = opt(False, "Use an OpenAI-compatible API model as the rollout model.")
    base_url_env: str = opt("OPENAI_BASE_URL", "Environment variable holding the API base URL.")
    api_key_env: str = opt("OPENAI_API_KEY", "Environment variable holding the API key.")
    model_name: Optional[str] = opt(None, "Model name sent to the API.")


@dataclass
class ModelConfig:
    model_path: Optional[str] = opt(REQUIRED, "Path of the model to train (a local directory).", required=True)
    critic_model_path: Optional[str] = opt(None, "Path of the critic model; model_path when unset.")
    custom_chat_template: Optional[str] = opt(None, "Chat template as a string; the tokenizer's when unset.")
    chat_template_path: Optional[str] = opt(None, "Jinja2 chat template file; wins over custom_chat_template.")
    max_model_len: Optional[int] = opt(None, "Longest sequence (prompt + response) in tokens.")
    max_prompt_tokens: Optional[int] = opt(None, "Longest prompt in tokens.")
    max_response_tokens: Optional[int] = opt(None, "Longest generated response in tokens.")
    min_response_tokens: int = opt(1, "Shortest generated response in tokens.")
    enable_prompt_truncation: bool = opt(True, "Cut prompts to max_prompt_tokens (longer ones are not trained on).")
    repetition_penalty: float = opt(1.0, "Repetition penalty applied when sampling.")
    temperature: float = opt(1.0, "Sampling temperature (tasksets may override it in rollout_args).")
    top_p: float = opt(1.0, "Nucleus sampling threshold.")
    top_k: int = opt(-1, "Top-k sampling; -1 turns it off.")
    logprobs: int = opt(0, "Number of top logprobs returned per generated token besides the chosen one.")
    enable_thinking: Optional[bool] = opt(None, "Pass enable_thinking to chat templates that support it.")
    dtype: str = opt("float32", "Weight data type of the trained model.", DTYPES)
    lora_configs: Optional[List[LoRAConfig]] = opt(
        None, "LoRA adapter to train instead of the weights (at most one; see docs/lora.md); null trains all weights."
    )
    rope_scaling: Optional[Dict[str, Any]] = opt(
        None, "RoPE scaling applied over the model's config.json, e.g. {rope_type: linear, factor: 2.0}: the "
        "trainer and the rollout engines load the model with it, and its checkpoints keep it.",
    )
    rope_theta: Optional[float] = opt(
        None, "RoPE base frequency applied over the model's config.json, like rope_scaling.",
    )
    tinker: TinkerConfig = section(TinkerConfig, "Tinker training service.")
    external_model: ExternalModelConfig = section(ExternalModelConfig, "OpenAI-compatible API model.")
    trust_remote_code: bool = opt(
        False, "Allow model code shipped with the checkpoint.",
        unused="local model directories load with the model classes built into transformers",
    )
    fully_sharded_loras: bool = opt(
        False, "Shard LoRA weights across tensor-parallel ranks (vLLM); copied into "
        "explorer.rollout_model.lora_kwargs when the vllm engine serves the trained adapter.",
    )
    max_cpu_loras: Optional[int] = opt(
        None, "LoRA adapters the vllm engine keeps in CPU memory (at least 1); copied into "
        "explorer.rollout_model.lora_kwargs when it serves the trained adapter.",
    )


# ---------------------------------------------------------------- cluster


@dataclass
class ClusterConfig:
    node_num: int = opt(1, "Number of machines.")
    gpu_per_node: Optional[int] = opt(None, "GPUs per machine; null counts them, 0 runs on CPU only.")
    placement: str = opt(
        "auto",
        "Where the components run: 'process' keeps explorer, engines and trainer in this process; 'ray' "
        "places them as Ray actors; 'auto' uses Ray when ray_address (or RAY_ADDRESS) is set or the run "
        "spans several machines or devices, and this process otherwise. A plugin placement (a subclass "
        "of trivium.runtime.placement.Placement) is given by its dotted path.",
        PLACEMENTS,
        dotted_path=True,
    )
    ray_address: Optional[str] = opt(
        None,
        "Address of a running Ray cluster to join ('auto' finds one started with `ray start --head`); "
        "the RAY_ADDRESS environment variable when unset. Without either, a Ray run starts a local "
        "Ray and shuts it down at the end.",
    )
    uses_ray: Optional[bool] = opt(None, "(derived) True when the components are placed on Ray.")
    # The device split below is derived by resolve(); users normally leave it alone.
    device_type: Optional[str] = opt(None, "(derived) 'cuda' or 'cpu'.")
    explorer_devices: Optional[int] = opt(None, "(derived) Devices of the rollout model engines.")
    auxiliary_devices: Optional[int] = opt(None, "(derived) Devices of all auxiliary model engines.")
    trainer_devices: Optional[int] = opt(None, "(derived) Devices left for the trainer.")
    shared_devices: Optional[bool] = opt(None, "(derived) True when components share devices (CPU or colocate).")
    # Trinity-RFT's names for the same split (docs/runtime.md, "Several machines"): filled by
    # resolve(); a value given in the config must equal the derived one.
    total_gpu_num: Optional[int] = opt(None, "(derived) GPUs of the whole cluster: node_num * gpu_per_node.")
    rollout_gpu_num: Optional[int] = opt(None, "(derived) GPUs of the rollout engines.")
    auxiliary_model_gpu_num: Optional[int] = opt(None, "(derived) GPUs of the auxiliary engines.")
    explorer_gpu_num: Optional[int] = opt(None, "(derived) GPUs of the explorer: rollout plus auxiliary engines.")
    trainer_gpu_num: Optional[int] = opt(None, "(derived) GPUs of the trainer: every GPU the explorer leaves.")
    trainer_node_num: Optional[int] = opt(None, "(derived) Machines of the trainer (the last ones).")
    trainer_gpu_num_per_node: Optional[int] = opt(None, "(derived) GPUs the trainer uses on each of its machines.")
    compute_device: str = opt(
        "auto",
        "What the components compute on: 'auto' is cuda when the cluster has GPUs; 'cpu' on a cluster "
        "with GPUs reserves and assigns them exactly as on a GPU cluster (Ray placement, "
        "CUDA_VISIBLE_DEVICES per actor) but computes on the CPU with gloo: a rehearsal of a GPU "
        "cluster's placement on machines without GPUs.",
        ["auto", "cuda", "cpu"],
    )
    engines_in_explorer: Optional[bool] = opt(
        None,
        "On Ray: run the rollout engines inside the explorer's actor (one process for all of them) "
        "instead of an actor each. null decides: inside when the run computes on the CPU of one "
        "machine and the engine type can share a process (hf, external), which starts fewer "
        "processes; an actor each otherwise (GPUs, vLLM, several machines).",
    )


# ---------------------------------------------------------------- buffer


@dataclass
class FormatConfig:
    prompt_type: str = opt("plaintext", "Shape of the prompt column.", PROMPT_TYPES)
    prompt_key: str = opt("prompt", "Column with the prompt (plaintext).")
    response_key: str = opt("response", "Column with the reference response (plaintext).")
    system_prompt_key: Optional[str] = opt(None, "Column with a system prompt (plaintext).")
    system_prompt: Optional[str] = opt(None, "System prompt for every row; system_prompt_key wins.")
    messages_key: str = opt("messages", "Column with the message list (messages).")
    tools_key: Optional[str] = opt(None, "Column with the tool list (a list of dicts).")
    chosen_key: str = opt("chosen", "Column with the preferred response (DPO).")
    rejected_key: str = opt("rejected", "Column with the dispreferred response (DPO).")
    enable_concatenated_multi_turn: bool = opt(False, "Train on every assistant turn of a dialogue (SFT).")
    chat_template: Optional[str] = opt(None, "Chat template for this dataset; model.custom_chat_template when unset.")
    reply_prefix: Optional[str] = opt(
        None, "Text every reply starts with: written after each generation prompt of the policy's chats for "
        "this dataset, so the model continues after it (prompt tokens, not trained on). Replies and rewards see "
        "what the model sampled; the chat history renders prefix and reply together.",
    )
    workflow_key: str = opt(
        "", "Column naming each row's workflow; the taskset's workflow where empty or missing. A row naming an "
        "unknown workflow is skipped and counted (an error with strict).",
    )
    reward_fn_key: str = opt(
        "", "Column naming each row's reward function; the taskset's where empty or missing. Checked like workflow_key.",
    )
    enable_thinking: Optional[bool] = opt(
        None, "enable_thinking passed to the chat template for this dataset's prompts (every workflow's calls to "
        "the policy, and its agents' HTTP sessions); the model's setting when unset.",
    )
    image_key: Optional[str] = opt(
        None, "Column with images.", unsupported="multimodal inputs are not supported: engines and trainer take text only"
    )
    video_key: Optional[str] = opt(
        None, "Column with videos.", unsupported="multimodal inputs are not supported: engines and trainer take text only"
    )


@dataclass
class TaskSelectorConfig:
    selector_type: str = opt("sequential", "Order in which tasks are drawn.", SELECTOR_TYPES)
    seed: Optional[int] = opt(None, "Seed of shuffle/random selection; the global seed when unset.")
    args: Dict[str, Any] = opt(
        {}, "Arguments of the selector. difficulty: target, temperature. difficulty_based: m (pseudo-count "
        "scale, 16), lamb (discount of the old belief, 0.2), rho (weight of the reference models' prior, 0.2), "
        "target_reward (0.5), tau (0: the best tasks; > 0: softmax temperature), do_sample (Thompson sampling).",
    )
    kwargs: Dict[str, Any] = opt({}, "Another name for args (merged into args).")
    feature_keys: List[str] = opt(
        [], "Columns with precomputed per-task features, read by difficulty_based: the pass rates of a weaker "
        "and a stronger reference model, in that order. Other selectors refuse them.",
    )


@dataclass
class ReplayBufferConfig:
    enable: bool = opt(False, "Reuse experiences of a queue buffer.")
    reuse_cooldown_time: Optional[float] = opt(None, "Seconds before an experience may be reused; null never.")
    priority_fn: str = opt("linear_decay", "Priority function ordering reuse.")
    priority_fn_args: Dict[str, Any] = opt({}, "Arguments of the priority function.")


@dataclass
class StorageConfig:
    name: str = opt("", "Unique name of the dataset or buffer.")
    storage_type: str = opt("file", "Where the data lives.", STORAGE_TYPES)
    path: Optional[str] = opt(None, "File: dataset directory or file; sql: database URL or file; queue: backup.")
    subset_name: Optional[str] = opt(None, "Dataset subset (the 'name' of datasets.load_dataset).")
    split: str = opt("train", "Dataset split.")
    repeat_times: Optional[int] = opt(None, "Rollouts per task; algorithm.repeat_times (1 for eval) when unset.")
    format: FormatConfig = section(FormatConfig, "Which columns hold what.")
    rollout_args: Dict[str, Any] = opt({}, "Sampling arguments: temperature, top_p, top_k, max_tokens, n...")
    workflow_args: Dict[str, Any] = opt({}, "Extra arguments for the workflow.")
    reward_fn_args: Dict[str, Any] = opt({}, "Extra arguments for the reward function.")
    default_workflow_type: Optional[str] = opt(None, "Workflow of this taskset; explorer_input's default when unset.")
    default_reward_fn_type: Optional[str] = opt(None, "Reward of this taskset; explorer_input's default when unset.")
    task_selector: TaskSelectorConfig = section(TaskSelectorConfig, "Task ordering.")
    enable_progress_bar: bool = opt(False, "Show a progress bar while reading.")
    max_read_timeout: float = opt(1800, "Seconds a reader waits for a full batch from a queue.")
    replay_buffer: ReplayBufferConfig = section(ReplayBufferConfig, "Experience reuse (queue only).")
    capacity: Optional[int] = opt(None, "Most items a queue holds before writers wait; null is unbounded.")
    max_row_chars: Optional[int] = opt(
        50000, "Dataset rows with more characters of text than this are skipped and counted; null keeps every row."
    )
    is_eval: bool = opt(False, "(derived) True for eval tasksets.")
    data_selector: Optional[TaskSelectorConfig] = opt(
        None, "Another name for task_selector; copied there when task_selector is left at its defaults."
    )
    schema_type: Optional[str] = opt(
        None, "Row layout of a trainer dataset (sft, dpo, experience).",
        unused="the layout follows from the format keys and the algorithm",
    )
    total_epochs: Optional[int] = opt(
        None, "Passes over this dataset.", unused="tasksets follow buffer.total_epochs; auxiliary datasets are reread as needed",
    )
    total_steps: Optional[int] = opt(None, "Steps over this dataset.", unused="buffer.total_steps counts the steps")
    max_retry_times: int = opt(3, "Retries of a failed database read.", unused="database reads retry with a fixed policy")
    max_retry_interval: int = opt(1, "Seconds between database retries.", unused="database reads retry with a fixed policy")
    index: int = opt(0, "Position of the taskset.", unused="derived by Trinity-RFT")
    batch_size: Optional[int] = opt(None, "Batch size of this dataset.", unused="buffer.batch_size and train_batch_size apply")
    tokenizer_path: Optional[str] = opt(None, "Tokenizer for this dataset.", unused="the trained model's tokenizer is used")
    ray_namespace: Optional[str] = opt(None, "Ray namespace of this buffer.", unused="a queue on Ray is an actor in the run's top-level ray_namespace")


@dataclass
class ExplorerInputConfig:
    taskset: Optional[StorageConfig] = opt(None, "A single training taskset (folded into tasksets).")
    tasksets: List[StorageConfig] = opt([], "Training tasksets.")
    eval_tasksets: List[StorageConfig] = opt([], "Evaluation tasksets.")
    default_workflow_type: Optional[str] = opt(None, "Workflow of tasksets that name none.")
    default_eval_workflow_type: Optional[str] = opt(None, "Workflow of eval tasksets that name none.")
    default_reward_fn_type: Optional[str] = opt(None, "Reward function of tasksets that name none.")


@dataclass
class TrainerInputConfig:
    experience_buffer: Optional[StorageConfig] = opt(
        None, "Explorer output and trainer input; a queue named experience_buffer when unset."
    )
    auxiliary_buffers: Dict[str, StorageConfig] = opt({}, "Extra datasets for the trainer, by name.")


@dataclass
class BufferConfig:
    batch_size: int = opt(1, "Tasks per explorer step (do not multiply by repeat_times).")
    train_batch_size: Optional[int] = opt(None, "Experiences per trainer step; batch_size * repeat_times when unset.")
    total_epochs: int = opt(1, "Passes over the tasksets.")
    total_steps: Optional[int] = opt(None, "Explorer steps; wins over total_epochs when set.")
    tokenizer_path: Optional[str] = opt(None, "Tokenizer used by the buffer.", unused="the trained model's tokenizer is used")
    cache_dir: Optional[str] = opt(None, "Cache directory of downloaded datasets.", unused="datasets are local files")
    explorer_input: ExplorerInputConfig = section(ExplorerInputConfig, "Datasets read by the explorer.")
    trainer_input: TrainerInputConfig = section(TrainerInputConfig, "Buffers read by the trainer.")


# ---------------------------------------------------------------- explorer


@dataclass
class InferenceModelConfig:
    engine_type: str = opt(
        "auto", "Inference backend: 'vllm' on GPUs when vLLM is installed, 'hf' (transformers, runs "
        "everywhere) otherwise; 'auto' picks between them and says which and why.",
        ENGINE_TYPES, dotted_path=True,
    )
    engine_num: int = opt(1, "Number of engines.")
    tensor_parallel_size: int = opt(1, "Devices per engine.")
    enable_history: bool = opt(False, "Record every model call as an experience.")
    gpu_memory_utilization: float = opt(0.9, "Fraction of a GPU's memory an engine may take.")
    enforce_eager: bool = opt(False, "Disable CUDA graphs in engines that use them.")
    dtype: Optional[str] = opt(None, "Engine weight data type; model.dtype when unset.", DTYPES)
    seed: Optional[int] = opt(None, "Sampling seed; the global seed when unset.")
    model_path: Optional[str] = opt(None, "Model served; model.model_path for the rollout model.")
    max_model_len: Optional[int] = opt(None, "Override of model.max_model_len for this engine.")
    max_prompt_tokens: Optional[int] = opt(None, "Override of model.max_prompt_tokens for this engine.")
    max_response_tokens: Optional[int] = opt(None, "Override of model.max_response_tokens for this engine.")
    enable_thinking: Optional[bool] = opt(None, "Override of model.enable_thinking for this engine.")
    name: Optional[str] = opt(None, "Name workflows use to find an auxiliary model.")
    # Options of the rollout engine itself, passed to its factory as keywords.
    enable_prefix_caching: bool = opt(False, "Reuse the key/value cache of shared prompt prefixes (vLLM).", engine_option="performance")
    enable_chunked_prefill: bool = opt(False, "Split long prefills into chunks (vLLM).", engine_option="performance")
    use_v1: bool = opt(True, "Use vLLM's V1 engine.", engine_option="performance")
    enable_log_requests: bool = opt(False, "Log every request the engine serves (vLLM).", engine_option="performance")
    enable_openai_api: bool = opt(
        False, "Serve this model over an OpenAI-compatible HTTP API to the workflows: each workflow's "
        "model.openai_base_url / get_openai_client() names a session of its own, recorded in its history.",
    )
    enable_auto_tool_choice: bool = opt(
        False, "The model decides when to call tools (tool_choice 'auto'); needs tool_call_parser, and "
        "tool_call_parser needs it, as in vLLM's server.",
    )
    tool_call_parser: Optional[str] = opt(
        None, "Parser turning the model's tool-call text into OpenAI tool_calls ('hermes').",
    )
    reasoning_parser: Optional[str] = opt(
        None, "Parser moving the model's thinking into the reply's reasoning_content ('deepseek_r1', 'qwen3'); "
        "the experience keeps every sampled token.",
    )
    trust_remote_code: bool = opt(False, "Allow model code shipped with the checkpoint.", engine_option="load")
    ignore_eos: bool = opt(False, "Keep generating past the end-of-sequence token.", engine_option="behaviour")
    # Per-engine sampling overrides of Trinity-RFT; trivium samples with model.* and rollout_args.
    temperature: Optional[float] = opt(None, "Sampling temperature of this engine.", unused="sampling follows model.* and each taskset's rollout_args")
    top_p: Optional[float] = opt(None, "Nucleus threshold of this engine.", unused="sampling follows model.* and each taskset's rollout_args")
    top_k: Optional[int] = opt(None, "Top-k of this engine.", unused="sampling follows model.* and each taskset's rollout_args")
    logprobs: Optional[int] = opt(None, "Top logprobs of this engine.", unused="sampling follows model.* and each taskset's rollout_args")
    min_response_tokens: Optional[int] = opt(None, "Shortest response of this engine.", unused="model.min_response_tokens applies")
    enable_prompt_truncation: Optional[bool] = opt(None, "Prompt truncation of this engine.", unused="model.enable_prompt_truncation applies")
    repetition_penalty: Optional[float] = opt(None, "Repetition penalty of this engine.", unused="model.repetition_penalty applies")
    chat_template: Optional[str] = opt(None, "Chat template of this engine.", unused="model.custom_chat_template applies")
    rope_scaling: Optional[Dict[str, Any]] = opt(None, "RoPE scaling of this engine.", unused="model.rope_scaling applies")
    rope_theta: Optional[float] = opt(None, "RoPE theta of this engine.", unused="model.rope_theta applies")
    bundle_indices: str = opt(
        "", "(derived) The cluster GPUs of this model's engines: engines separated by ';', tensor-parallel "
        "ranks by ','. A value given must equal the derived one."
    )
    ray_namespace: Optional[str] = opt(None, "Ray namespace of this engine.", unused=ENGINE_PLACEMENT)
    cuda_visible_devices: Optional[str] = opt(
        None, "Devices of this engine.",
        unsupported="devices are assigned by the placement: on Ray each engine gets the GPUs Ray gives its "
        "bundle (recorded in the run's ray_placement.json); in one process the engines take the GPUs after "
        "the trainer's. To choose physical GPUs, set CUDA_VISIBLE_DEVICES for the whole run",
    )
    enable_lora: Optional[bool] = opt(
        None, "Serve the trained LoRA adapter as an adapter in the vllm engine: every sync sends the adapter "
        "alone, which the engine loads as a new adapter version. null: on when model.lora_configs trains an "
        "adapter and the rollout engine is vllm; false: the engine is sent whole merged weights at every sync "
        "instead. Refused on other engines and on auxiliary models.",
        engine_option="behaviour",
    )
    enable_runtime_lora_updating: bool = opt(
        False, "Load LoRA adapters while serving.",
        unused="the vllm engine loads every synced adapter version itself, through vLLM's engine API; this vLLM "
        "switch only opens the adapter routes of vLLM's own HTTP server, which trivium does not run",
    )
    lora_modules: Optional[List[Dict[str, Any]]] = opt(
        None, "LoRA adapters to serve.",
        unsupported="the vllm engine serves one adapter, the one trivium trains (model.lora_configs; "
        "model.lora_configs[0].path starts it from a saved adapter); serving other adapters, chosen per request, "
        "is not built",
    )
    lora_kwargs: Optional[Dict[str, Any]] = opt(
        None, "vLLM's LoRA engine arguments when the adapter is served (filled when unset): max_lora_rank (the smallest rank vLLM "
        "allows at or above model.lora_configs[0].lora_rank), max_loras 1, and model.fully_sharded_loras / "
        "max_cpu_loras when set. Values given here win; allowed keys: max_lora_rank, max_loras, max_cpu_loras, "
        "fully_sharded_loras, lora_dtype.",
        engine_option="behaviour",
    )


@dataclass
class OverRolloutConfig:
    ratio: float = opt(
        0.0,
        "Fraction of a step's tasks the explorer may leave behind: the step goes on once (1 - ratio) of its "
        "tasks are done and wait_after_min has passed; 0 waits for every task. Needs a sync_style other than fixed.",
    )
    wait_after_min: float = opt(
        30.0, "Seconds the explorer keeps waiting for the remaining tasks once (1 - ratio) of them are done."
    )
    return_partial_tasks: bool = opt(
        False,
        "When a task's repeats run as several jobs (max_repeat_times_per_runner) and only some of them finished "
        "when the step goes on: true keeps the finished samples as a smaller group, false drops the whole task.",
    )


@dataclass
class DynamicTimeoutConfig:
    enable: bool = opt(
        False, "Give each task a timeout of the mean successful task time times ratio (at most explorer.max_timeout)."
    )
    ratio: float = opt(3.0, "Dynamic timeout = mean seconds of the successful tasks so far * ratio.")


@dataclass
class ExplorerConfig:
    name: str = opt("explorer", "Name of the explorer component.")
    runner_per_model: int = opt(8, "Workflow runners per rollout engine.")
    concurrent_mode: str = opt("sequential", "How a runner executes the repeats of a task.", CONCURRENT_MODES)
    max_repeat_times_per_runner: Optional[int] = opt(None, "Split a task's repeats into runner jobs of at most this.")
    max_timeout: float = opt(900, "Seconds a workflow may run.")
    max_retry_times: int = opt(2, "Retries of a failed workflow.")
    max_failed_steps: Optional[int] = opt(
        3, "Explore steps in a row in which every task fails before the run stops with an error; null never stops."
    )
    env_vars: Dict[str, str] = opt({}, "Environment variables set for every runner.")
    rollout_model: InferenceModelConfig = section(InferenceModelConfig, "Engines of the policy being trained.")
    auxiliary_models: List[InferenceModelConfig] = opt([], "Other models workflows may call (judges, reward models).")
    eval_interval: int = opt(100, "Explorer steps between evaluations (a multiple of sync_interval).")
    eval_on_startup: bool = opt(True, "Evaluate the initial model at step 0.")
    over_rollout: OverRolloutConfig = section(OverRolloutConfig, "Proceed before the slowest tasks finish.")
    dynamic_timeout: DynamicTimeoutConfig = section(DynamicTimeoutConfig, "Adaptive task timeouts.")
    runner_state_report_interval: float = opt(0, "Seconds between runner status reports; 0 is off.")
    bench_on_latest_checkpoint: bool = opt(False, "In bench mode, evaluate only the newest checkpoint.")
    runner_num: Optional[int] = opt(None, "Total workflow runners (older spelling).", unused="runner_per_model sets the runners")
    proxy_port: int = opt(8010, "Port of the OpenAI-compatible API that serves the policy in serve mode.")
    listen_address: str = opt(
        "127.0.0.1", "Address the serve-mode API listens on; 127.0.0.1 (this machine only) by default. 0.0.0.0 "
        "opens it to every network interface: anyone who reaches it can sample the policy and post rewards.",
    )
    api_key_env: Optional[str] = opt(
        None, "Environment variable holding the API key that clients of trivium's OpenAI-compatible servers "
        "(serve mode, enable_openai_api) must send as 'Authorization: Bearer <key>'; unset, no key is asked. "
        "The key itself never goes into a config file.",
    )
    service_status_check_interval: int = opt(
        60, "Seconds between serve mode's engine health checks: each serving engine samples one token, and one "
        "that raises or does not answer within this many seconds leaves the rotation.",
    )
    min_running_model_num: int = opt(
        1, "Engines that keep serving in serve mode (1..explorer.rollout_model.engine_num): new weights load into "
        "the others first, in turns; the run ends with an error when health checks leave fewer.",
    )
    db_url: Optional[str] = opt(
        None, "Database of served experiences in serve mode.",
        unused="serve mode writes its experiences to buffer.trainer_input.experience_buffer",
    )


# ---------------------------------------------------------------- synchronizer / trainer


@dataclass
class SynchronizerConfig:
    sync_method: Optional[str] = opt(None, "Weight transport; derived from mode and devices when unset.", SYNC_METHODS)
    sync_interval: int = opt(1, "Steps between weight synchronizations.")
    sync_offset: int = opt(
        0, "Steps the explorer may run ahead of the trainer; with fully_async, the largest staleness (in "
        "weight versions) of the samples it produces.",
    )
    sync_timeout: float = opt(
        1200, "Seconds a synchronization may take. A trainer of several ranks (trainer.data_parallel_size) "
        "also waits at most this long in one collective, and for a rank's heartbeat: a rank that dies or "
        "stops answering ends the run with an error naming it (docs/fsdp.md).",
    )
    sync_style: str = opt(
        "fixed",
        "Who decides when to synchronize. fully_async (mode both): the trainer publishes every sync_interval "
        "of its steps and the explorer loads the newest weights before each of its steps without waiting, "
        "unless it would run more than sync_offset versions ahead.",
        SYNC_STYLES,
    )
    self_check_interval: int = opt(
        10,
        "Weight syncs between logprob self-checks (engine vs trainer on two fresh samples); the first "
        "sync is always checked; 0 turns the check off.",
    )
    wait_for_checkpoint: bool = opt(
        False, "With checkpoint sync, wait for the trainer's next checkpoint instead of loading the latest.",
        unused="the synchronizer hands over each version itself",
    )
    explorer_world_size: Optional[int] = opt(
        None, "(derived in the reference) Ranks of the explorer's engines.",
        unused="the weight broadcast group is sized when it forms: one rank for the trainer plus each engine's receiving ranks",
    )
    ray_namespace: Optional[str] = opt(
        None, "Ray namespace of the synchronizer.",
        unused="the synchronizer runs in the run's driver process; the run's Ray actors use the top-level ray_namespace",
    )


@dataclass
class TrainerConfig:
    name: str = opt("trainer", "Name of the trainer component.")
    trainer_type: str = opt("default", "Trainer backend; 'verl' is accepted as an alias of 'default'.", TRAINER_TYPES)
    trainer_strategy: str = opt(
        "fsdp",
        "Parallelism of the trainer over its ranks: 'fsdp' and 'fsdp2' both shard actor, reference and "
        "critic with PyTorch's FSDP2 (fully_shard) when data_parallel_size > 1; with one rank they "
        "train unsharded. 'ddp' keeps the whole models on every rank and all-reduces gradients (FSDP2 over a "
        "replicate-only mesh). 'none' allows one rank only; 'megatron' is not implemented.",
        TRAINER_STRATEGIES,
    )
    data_parallel_size: Optional[int] = opt(
        None,
        "(derived when unset) Ranks of the trainer, each training on its share of every batch: "
        "cluster.trainer_devices on GPUs (one rank per device, nccl), 1 on a CPU-only machine. Set it "
        "to N on a CPU to run N trainer processes over gloo (local processes, or Ray actors under Ray placement).",
    )
    param_offload: bool = opt(
        False,
        "Keep the trainer's sharded parameters and gradients in CPU memory (FSDP2's CPUOffloadPolicy; "
        "the optimizer then steps there too). GPU ranks with data_parallel_size > 1 only.",
    )
    optimizer_offload: bool = opt(
        False,
        "Keep the optimizer state in CPU memory. FSDP2 keeps it with the parameter shards, so it "
        "requires param_offload: true (which offloads both).",
    )
    total_steps: Optional[int] = opt(None, "(derived when unset) Trainer steps of the run.")
    save_interval: int = opt(0, "Trainer steps between checkpoints; 0 saves only at the end.")
    save_strategy: str = opt(
        "unrestricted", "How concurrent checkpoint writes are serialized.", SAVE_STRATEGIES,
        unused="one trainer process writes each checkpoint, so writes never overlap",
    )
    save_hf_checkpoint: str = opt("last", "Which checkpoints also get a Hugging Face export.", SAVE_HF_CHOICES)
    grad_clip: float = opt(1.0, "Gradient norm clip.")
    use_dynamic_bsz: bool = opt(True, "Pack micro-batches by token budget instead of a fixed count.")
    max_token_len_per_gpu: Optional[int] = opt(None, "Token budget of a micro-batch; max(16384, 2 * max_model_len) when unset.")
    ppo_micro_batch_size_per_gpu: int = opt(1, "Experiences per micro-batch when use_dynamic_bsz is off.")
    ppo_epochs: int = opt(1, "Passes over each training batch.")
    ulysses_sequence_parallel_size: int = opt(1, "Sequence-parallel degree.")
    max_checkpoints_to_keep: Optional[int] = opt(None, "Older checkpoints are deleted; null keeps all.")
    old_logprobs_source: str = opt(
        "auto",
        "Where the behaviour policy's logprobs come from: 'auto' reuses the update's own forward pass "
        "when a batch gets one optimizer step (identical numbers, no extra pass) and recomputes "
        "otherwise; 'recompute' always runs a no-grad pass first; 'engine' uses the rollout engine's "
        "logprobs; 'decoupled' keeps the proximal policy of 'auto' in the clipped ratio and weights each "
        "token by pi_proximal / pi_engine (the engine sampled it, maybe with older weights; decoupled PPO).",
        OLD_LOGPROBS_SOURCES,
    )
    behaviour_weight_cap: Optional[float] = opt(
        5.0, "With old_logprobs_source 'decoupled': the largest importance weight pi_proximal / pi_engine "
        "(truncated importance sampling); null leaves it uncapped.",
    )
    behaviour_weight_range: Optional[List[float]] = opt(
        None, "With old_logprobs_source 'decoupled': [low, high]; a token whose weight pi_proximal / "
        "pi_engine falls outside is masked out of the update (weight 0), before the cap applies. "
        "E.g. [0.5, 2.0]; null masks nothing.",
    )
    replay_sampling_mask: bool = opt(
        False,
        "Sampling-mask replay: the rollout engine records, for each sampled token, the token ids its "
        "top-k / top-p truncation kept, and reports the token's logprob under that truncated, renormalised "
        "distribution at the sampling temperature; the trainer computes every response logprob (current, "
        "old, reference) the same way, z_t / T - logsumexp(z[kept] / T), so ratios against the engine's "
        "logprobs compare like with like. Entropy stays the full-vocabulary entropy at temperature 1. "
        "Needs top_k or top_p (model.* or a taskset's rollout_args), no repetition penalty, and an engine "
        "that records the sets (hf); not in serve mode, nor with a teacher's logprobs (distillation).",
    )
    sampling_mask_max_tokens: int = opt(
        1024,
        "With replay_sampling_mask: the largest kept set recorded per token. A token whose set is larger "
        "is recorded without it and scored over the whole vocabulary at its temperature, by the engine "
        "and the trainer alike; the metric sampling_mask/capped_share counts such tokens.",
    )
    share_prompt_forward: bool = opt(
        True, "Rows with the same prompt share one forward pass over it (exact, gradients included)."
    )
    use_remove_padding: bool = opt(
        False,
        "Micro-batches may run packed: the real tokens of every row laid end to end, without padding, "
        "each sequence with its own positions and attention. With use_dynamic_bsz the token budget then "
        "counts real tokens. Each micro-batch runs whichever exact forward (padded, shared prompt, packed) "
        "feeds the model fewest tokens. Llama, Qwen2, Qwen3 and Mistral models.",
    )
    enable_gradient_checkpointing: bool = opt(
        False, "Recompute activations in the backward pass: less memory, about a third more compute."
    )
    logit_chunk_tokens: Optional[int] = opt(
        None,
        "The trainer computes the language-model head this many positions at a time, each chunk's "
        "logits recomputed in the backward pass, so no (tokens x vocabulary) tensor of a whole "
        "micro-batch is ever held (same numbers). null: 1024 for vocabularies of 32k entries or more, "
        "unchunked below (small heads are cheaper whole); 0: never chunked.",
    )
    critic_lr: float = opt(1e-5, "Learning rate of the critic (PPO with a value model).")
    cliprange_value: float = opt(0.5, "Clip range of the critic's value loss around the old values.")
    truncation: str = opt(
        "mask",
        "Multi-turn episodes that reached max_model_len and ended there (flagged episode_truncated): "
        "'mask' keeps them out of the loss, 'keep' trains on their model tokens like any other.",
        TRUNCATION_CHOICES,
    )
    trainer_config: Any = opt(
        None,
        "veRL-style settings for users who bring them (critic.optim.lr, critic.cliprange_value, "
        "actor_rollout_ref.model.enable_gradient_checkpointing, actor_rollout_ref.model.use_remove_padding, "
        "the actor's fsdp_config.param_offload and optimizer_offload, old_logprobs_source, "
        "share_prompt_forward): each is copied to the trainer key of the same meaning; any other "
        "entry is reported by `trivium plan` as unused.",
    )
    enable_preview: bool = opt(False, "Preview trainer outputs in Trinity-RFT's web UI.", unused="trivium studio shows every run's experiences without it")
    fix_actor_microbatch_loss_scale: bool = opt(
        False, "Scale micro-batch losses by their share of the batch.", unused="micro-batch losses are always scaled exactly"
    )
    trainer_config_path: str = opt("", "File with backend settings.", unused="put backend settings in trainer.trainer_config")


# ---------------------------------------------------------------- monitor, services, data, log


@dataclass
class MonitorConfig:
    monitor_type: str = opt(
        "none", "Extra metrics sink; console and metrics.jsonl are always on.", MONITOR_TYPES, dotted_path=True
    )
    monitor_args: Dict[str, Any] = opt({}, "Arguments of the sink (wandb base_url, mlflow uri, ...).")
    enable_ray_timeline: bool = opt(False, "Export a Ray timeline.json into the run's monitor directory.")
    detailed_stats: bool = opt(False, "Log per-group reward statistics.", unused="trivium logs its fixed metric set")
    cache_dir: Optional[str] = opt(None, "Where monitors cache files.", unused="monitors write into the run directory")


@dataclass
class DataJuicerServiceConfig:
    server_url: Optional[str] = opt(
        None, "URL of a Data-Juicer server. " + DATA_JUICER_IN_PROCESS + "; `trivium plan` notes it."
    )
    auto_start: bool = opt(
        False, "Start Data-Juicer with the run. It always is, in the explorer's process; `trivium plan` notes it."
    )
    port: Optional[int] = opt(
        None, "Port of an automatically started server. " + DATA_JUICER_IN_PROCESS + "; `trivium plan` notes it."
    )


@dataclass
class ServiceConfig:
    data_juicer: Optional[DataJuicerServiceConfig] = opt(None, "Data-Juicer processing service.")


@dataclass
class OperatorConfig:
    name: str = opt("", "Registered operator name.")
    args: Dict[str, Any] = opt({}, "Arguments of the operator.")


@dataclass
class PipelineConfig:
    operators: List[OperatorConfig] = opt([], "Operators applied in order.")
    num_process: int = opt(1, "Worker processes of the pipeline.", unused="operators run in the explorer's process")
    inputs: List[str] = opt(
        [], "Input dataset paths (task pipeline).", unused="the task pipeline filters the tasksets of buffer.explorer_input"
    )
    target_fields: List[str] = opt(
        [], "Fields each Data-Juicer operator reads (it runs once per field) unless its args name a text_key."
    )
    save_input: bool = opt(
        False, "Experience pipeline: append every experience entering it, before any operator, as one JSON line "
        "to input_save_path."
    )
    input_save_path: Optional[str] = opt(
        None, "Where save_input writes (a .jsonl file); unset: <run directory>/buffer/explorer_output.jsonl."
    )
    config_path: Optional[str] = opt(
        None, "A Data-Juicer recipe file whose `process` operators the pipeline runs in place of operators "
        "(its text_keys, else target_fields, are the fields they read)."
    )
    priority_weights: Dict[str, float] = opt(
        {}, "Task pipeline: weights of the task scores quality and difficulty (from the operators' Data-Juicer "
        "stats); tasks are ordered by the weighted sum, highest first. Only top_k set: quality 1.0, difficulty -0.7."
    )
    top_k: int = opt(-1, "Task pipeline: keep only the top-k tasks by priority (-1: all).")


@dataclass
class DataProcessorConfig:
    task_pipeline: Optional[PipelineConfig] = opt(None, "Processing of tasksets before exploring.")
    experience_pipeline: Optional[PipelineConfig] = opt(None, "Processing of experiences before the buffer.")


@dataclass
class LogConfig:
    level: str = opt("INFO", "Log level of the components.", LOG_LEVELS)
    group_by_node: bool = opt(False, "Put logs under log/<node_ip>/.")
    save_dir: str = opt("", "Where component logs go.", unused="logs go to <run directory>/log")


@dataclass
class StageConfig:
    stage_name: str = opt("", "Unique stage name; suffixes the run name.")
    mode: Optional[str] = opt(None, "Mode of this stage; the global mode when unset.", MODES)
    algorithm: Optional[Dict[str, Any]] = opt(None, "Keys merged over the global algorithm section.")
    buffer: Optional[Dict[str, Any]] = opt(None, "Keys merged over the global buffer section.")
    explorer: Optional[Dict[str, Any]] = opt(None, "Keys merged over the global explorer section.")
    trainer: Optional[Dict[str, Any]] = opt(None, "Keys merged over the global trainer section.")
    model: Optional[Dict[str, Any]] = opt(None, "Keys merged over the global model section.")
    synchronizer: Optional[Dict[str, Any]] = opt(None, "Keys merged over the global synchronizer section.")
    init_from_previous_stage: bool = opt(
        True, "Start from the previous stage's final weights unless model.model_path is overridden here."
    )


# ---------------------------------------------------------------- root


@dataclass
class TriviumConfig:
    project: str = opt("trivium", "Project name (groups runs).")
    name: str = opt("run", "Run name.")
    mode: str = opt(
        "both", "What runs: explorer and trainer, one of them, a benchmark, both on one device, or serve (the "
        "policy served to outside applications over an OpenAI-compatible API while the trainer learns from "
        "their rewarded sessions).", MODES,
    )
    checkpoint_root_dir: str = opt("./checkpoints", "Root of run directories <root>/<project>/<name>/.")
    continue_from_checkpoint: bool = opt(True, "Resume from the run directory; else a used one gets a timestamp.")
    ray_namespace: Optional[str] = opt(None, "Ray namespace; <project>/<name> when unset.")
    group: str = opt(
        "", "Group of related runs in the monitors: wandb's run group, the MLflow tag trivium.group, a "
        "TensorBoard folder monitor/tensorboard/<group>/. Empty: wandb groups a run's explorer and trainer by name.",
    )
    ignore_validator_suggestions: bool = opt(False, "Do not print configuration suggestions.")
    seed: int = opt(42, "Global random seed.")
    algorithm: AlgorithmConfig = section(AlgorithmConfig, "What is optimized and how.")
    model: ModelConfig = section(ModelConfig, "The trained model and its token limits.")
    cluster: ClusterConfig = section(ClusterConfig, "Machines and devices.")
    buffer: BufferConfig = section(BufferConfig, "Tasksets, the experience buffer and batch sizes.")
    explorer: ExplorerConfig = section(ExplorerConfig, "Rollout engines and workflow runners.")
    trainer: TrainerConfig = section(TrainerConfig, "The trainer.")
    synchronizer: SynchronizerConfig = section(SynchronizerConfig, "Weight synchronization.")
    monitor: MonitorConfig = section(MonitorConfig, "Metrics sinks.")
    service: ServiceConfig = section(ServiceConfig, "External services.")
    data_processor: DataProcessorConfig = section(DataProcessorConfig, "Task and experience pipelines.")
    log: LogConfig = section(LogConfig, "Component logging.")
    stages: List[StageConfig] = opt([], "Stages run one after another, each overriding sections.")
    # Filled by resolve()/expand_stages(); written to config.resolved.yaml for the runtime.
    checkpoint_job_dir: Optional[str] = opt(None, "(derived) The run directory.")
    stage_index: Optional[int] = opt(None, "(derived) Position of this stage, from 0; null without stages.")
    stage_name: Optional[str] = opt(None, "(derived) Name of this stage.")
    previous_stage_job_dir: Optional[str] = opt(None, "(derived) Run directory of the stage before this one.")


def field_choices(cls: type, name: str) -> Optional[List[Any]]:
    return cls.__dataclass_fields__[name].metadata.get("choices")


def field_default(cls: type, name: str) -> Any:
    return cls.__dataclass_fields__[name].default
