"""TrainingConfig: every knob of a Trainer run, with the names Transformers users know.

Each field's docstring becomes its ``--help`` text. :func:`parse_config` fills this dataclass
(and any of the script's own) from the command line and from a TOML or YAML file, and reports
every problem at once. Device, precision and compile rules are not repeated here: they are the
plan's (``braeburn.plan.rules.make_plan``), which :func:`parse_config` asks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from ..plan.option_spelling import advice, option
from ..plan.rules import COMPILE_MODES, OptionError, RunOptions, compile_value
from ..errors import note_once
from ._argparse import ConfigError, parse_dataclasses

SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "constant", "constant_with_warmup", "cosine_with_min_lr",
              "polynomial", "inverse_sqrt", "reduce_lr_on_plateau", "warmup_stable_decay")
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw", "sgd", "adagrad", "rmsprop")
LOGGING_STRATEGIES = ("no", "steps", "epoch")
FSDP_UNITS = ("auto", "block", "root")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical", "passive")
STRATEGIES = ("no", "steps", "epoch")
STEP_BREAKDOWN = ("auto", "true", "false")
NAN_POLICIES = ("stop", "skip")
REPORT_TO = ("all", "tensorboard", "none")


def tensorboard_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None



def _devices_value(devices: object) -> object:
    """A count given as text (Transformers' parser reads --devices as a string) as the int; None as auto."""
    if devices is None:
        return "auto"
    if isinstance(devices, str) and devices.strip().isdigit():
        return int(devices)
    return devices


def _expand_home(path: object) -> object:
    """``~`` or ``~user`` at the start of a path, expanded; anything else as it is."""
    if isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith("~"):
        expanded = os.path.expanduser(os.fspath(path))
        return expanded if isinstance(path, str) else type(path)(expanded)
    return path


@dataclass
class CoreTrainingConfig:
    """How to train: batch sizes, optimisation, logging, evaluation, checkpoints and the device.

    Its fields carry the names Transformers users know, and Transformers' spellings of braeburn's options
    (``bf16`` for ``mixed_precision="bf16"``, ...) are mapped onto them. ``braeburn.TrainingConfig`` and
    ``braeburn.TrainingArguments`` are this class with the rest of Transformers' ``TrainingArguments``: every
    field of it accepted, honoured, or refused with what to use instead (docs/migrating.md).
    """

    output_dir: str = "outputs"
    """Folder for checkpoints, metrics and plots. braeburn writes and deletes nothing outside it."""
    overwrite_output_dir: bool = False
    """Train over braeburn's own files of an earlier run in output_dir, in place (without it, they are first moved to
    previous-run-N/); never over a file braeburn did not write."""
    do_train: bool = False
    """For scripts: run training."""
    do_eval: bool = False
    """For scripts: run evaluation on the eval set."""
    do_predict: bool = False
    """For scripts: run prediction on the test set."""
    per_device_train_batch_size: int = 8
    """Training batch size on each device (the global batch is this x devices x accumulation)."""
    per_device_eval_batch_size: int = 8
    """Evaluation batch size on each device."""
    gradient_accumulation_steps: int = 1
    """Micro-batches whose gradients are summed before each optimizer step."""
    learning_rate: float = 5e-5
    """Peak learning rate of the default AdamW optimizer."""
    weight_decay: float = 0.0
    """Decoupled weight decay of AdamW; biases and norm weights (1-D parameters) get none."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.999
    """AdamW beta2."""
    adam_epsilon: float = 1e-8
    """AdamW epsilon."""
    max_grad_norm: float = 1.0
    """Clip the gradient norm to this value; 0 turns clipping off."""
    num_train_epochs: float = 3.0
    """Passes over the training set (a fraction stops part way through the last one)."""
    max_steps: int = -1
    """Optimizer steps to run; overrides num_train_epochs when > 0."""
    lr_scheduler_type: str = "linear"
    """Learning-rate schedule (Transformers' names): linear, cosine, cosine_with_restarts, cosine_with_min_lr,
    polynomial, inverse_sqrt, constant, constant_with_warmup, reduce_lr_on_plateau or warmup_stable_decay."""
    warmup_steps: float = 0
    """Optimizer steps of linear warmup from 0 (below 1: a share of all steps); wins over warmup_ratio when > 0."""
    warmup_ratio: float = 0.0
    """Share of all optimizer steps used for warmup, in [0, 1)."""
    logging_steps: int = 50
    """Read the loss (a host-device sync) and log every this many optimizer steps."""
    eval_strategy: str = "no"
    """When to evaluate during training: no, steps (every eval_steps) or epoch."""
    eval_steps: int | None = None
    """Optimizer steps between evaluations with eval_strategy=steps (default: logging_steps)."""
    save_strategy: str = "epoch"
    """When to save a checkpoint: no, steps (every save_steps) or epoch."""
    save_steps: int = 500
    """Optimizer steps between checkpoints with save_strategy=steps."""
    save_in_background: bool = True
    """Snapshot the state at the save step and write the checkpoint in a thread while training goes on (one process); false writes it before the next step."""
    save_total_limit: int | None = None
    """Keep at most this many checkpoints (the best one is never deleted); none: keep all."""
    metric_for_best_model: str | None = None
    """The eval metric that decides the best checkpoint; none: no best is tracked, unless load_best_model_at_end
    (then eval_loss), as in Transformers."""
    greater_is_better: bool | None = None
    """Whether a larger metric_for_best_model is better; default: true unless the metric's name ends in loss."""
    seed: int = 42
    """Seed of every random generator (python, torch, the device) set at the start."""
    full_determinism: bool = False
    """Deterministic algorithms everywhere (torch's switch, cuDNN, CUBLAS_WORKSPACE_CONFIG=:4096:8, compile without on-device tuning): bitwise-equal runs and resumes on a GPU, somewhat slower. CPU runs are bitwise without it."""
    mixed_precision: str = "auto"
    """auto (the best the device does well), no (float32), fp16 or bf16."""
    use_cpu: bool = field(default=False, metadata={"aliases": ("--cpu",)})
    """Train on the CPU even when a GPU is available (--cpu is the same flag)."""
    accelerator: str = "auto"
    """Device kind as Lightning spells it: auto, gpu, cuda, mps or cpu."""
    # None in the type only so Transformers' HfArgumentParser reads the flag as text: for a two-type union it
    # would convert the "auto" default with int() and fail before parsing. __post_init__ makes "2" the int 2.
    devices: int | str | None = "auto"
    """How many devices of that kind to use, or auto."""
    compile: str = "auto"
    """torch.compile the model: auto (only when the measured eager time still ahead earns the compile back: whole, by regions or not at all), true (the whole forward), regional (each repeated block and the loss, the rest eager: a shorter cold compile, slower steps) or false."""
    torch_compile_backend: str = "inductor"
    """The torch.compile backend when compiling (Transformers' name): inductor, or another of torch.compiler.list_backends()."""
    torch_compile_mode: str | None = None
    """torch.compile's mode when compiling: default, reduce-overhead, max-autotune (unset: default). In TrainingArguments and TrainingConfig, setting it turns torch_compile on, as in Transformers."""
    pad_to_buckets: bool = True
    """On devices where each new shape costs a kernel plan or a graph (CUDA, MPS), pad text batches (input_ids with an attention_mask) further, to multiples of 64 tokens, so kernels and compiled graphs see few shapes; the CPU keeps the collator's lengths; false keeps them everywhere."""
    step_breakdown: str = "auto"
    """Profile 5 steps near the end of the run and report the share of step time spent computing, waiting on communication and with the GPU idle waiting for the host: auto (on several processes), true (also on one) or false."""
    strategy: str = "auto"
    """With several processes: auto (ddp), ddp (a model copy per process) or fsdp (parameters sharded)."""
    fsdp_units: str = "auto"
    """With --strategy fsdp: auto (one FSDP unit for a model DDP could hold, else one per block), block (one per block, as Transformers' and Accelerate's TRANSFORMER_BASED_WRAP: less memory, more collectives) or root (one)."""
    freeze_heap: bool = True
    """Freeze Python's heap (gc.freeze) after the first step, so that full collections during training skip what setup made; false leaves the collector alone."""
    resume_from_checkpoint: str | None = None
    """Resume from this checkpoint folder, or "latest" for the last complete one in output_dir."""
    nan_policy: str = "stop"
    """On a NaN or infinite loss: stop (naming the step and the last good checkpoint), or skip the step (one host sync per step)."""
    auto_find_batch_size: bool = False
    """Halve per_device_train_batch_size after an out-of-memory error until a step fits; an out-of-memory error
    later in training halves it again (doubling gradient_accumulation_steps) and goes on from the last step."""
    dataloader_num_workers: int = 0
    """DataLoader worker processes (0 loads in the main process, often fastest for in-memory data)."""
    dataloader_drop_last: bool = False
    """Drop the last incomplete training batch."""
    # -- Transformers' TrainingArguments names, mapped onto the options above or honoured as they are there.
    bf16: bool = False
    """Transformers' spelling of --mixed_precision bf16."""
    fp16: bool = False
    """Transformers' spelling of --mixed_precision fp16."""
    # (nargs/const: a bare --torch_compile means True under Transformers' HfArgumentParser too, whose own field is a
    # bool; it leaves an Optional[bool] needing a value. braeburn's parser reads only help and aliases.)
    torch_compile: bool | None = field(default=None, metadata={"nargs": "?", "const": True})
    """Transformers' spelling of --compile true (false: --compile false; unset: --compile decides)."""
    use_mps_device: bool = False
    """Deprecated by Transformers (MPS is the default on a Mac); accepted with a note. Use --accelerator mps."""
    fsdp: str | None = None
    """Transformers' FSDP option (e.g. full_shard): any value means --strategy fsdp."""
    tf32: bool | None = None
    """Allow TensorFloat-32 matmuls (torch.set_float32_matmul_precision('high')) where the device has them."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory (model.gradient_checkpointing_enable())."""
    gradient_checkpointing_kwargs: dict | str | None = None
    """Keyword arguments (JSON) for model.gradient_checkpointing_enable, e.g. {"use_reentrant": false}."""
    activation_checkpointing: bool | None = None
    """Transformers' newer name of gradient_checkpointing."""
    activation_checkpointing_kwargs: dict | str | None = None
    """Transformers' newer name of gradient_checkpointing_kwargs."""
    label_smoothing_factor: float = 0.0
    """Label smoothing of the cross-entropy loss computed from the logits (0: the model's own loss)."""
    optim: str = "adamw_torch_fused"
    """The optimizer: adamw_torch_fused (fused where the device has it), adamw_torch, sgd, adagrad or rmsprop."""
    optim_args: str | None = None
    """Extra optimizer arguments as key=value pairs separated by commas, e.g. momentum=0.9."""
    lr_scheduler_kwargs: dict | str | None = None
    """Schedule arguments (JSON): num_cycles (cosines), min_lr or min_lr_rate (cosine_with_min_lr), power and lr_end
    (polynomial, 1e-7 by default), timescale (inverse_sqrt)."""
    average_tokens_across_devices: bool = True
    """Accepted for Transformers' scripts: braeburn averages each batch's loss as the model returns it."""
    logging_strategy: str = "steps"
    """When to log the training loss: steps (every logging_steps), epoch or no."""
    logging_first_step: bool = False
    """Also log after the first optimizer step."""
    logging_dir: str | None = None
    """TensorBoard folder (default: output_dir/tensorboard)."""
    log_level: str = "passive"
    """Logging level on the main process (get_process_log_level()): debug, info, warning, error, passive."""
    log_level_replica: str = "warning"
    """Logging level on the other processes."""
    verbose: bool = False
    """Let third-party output through (Transformers' load reports and progress bars, the profiler's lines), which
    braeburn holds back by default; --log_level info or debug does too."""
    disable_tqdm: bool | None = None
    """No live progress bar: plain log lines instead (default: a bar on a terminal only)."""
    report_to: list[str] | None = field(default_factory=lambda: ["none"])
    """Trackers besides metrics.jsonl (always written): none (the default, as in Transformers 5), all (every one installed), or names: tensorboard, wandb, mlflow."""
    run_name: str | None = None
    """The run's name for the trackers (default: the output_dir's name)."""
    project: str = "huggingface"
    """The project name for the trackers that group runs (wandb, mlflow)."""
    prediction_loss_only: bool = False
    """evaluate() returns the loss only (no predictions kept, no compute_metrics)."""
    eval_on_start: bool = False
    """Evaluate once before training starts (a sanity check of the evaluation code)."""
    eval_accumulation_steps: int | None = None
    """Copy eval predictions to the CPU every this many batches (unset: when they hold 64 MiB, or at the end)."""
    load_best_model_at_end: bool = False
    """Load the best checkpoint's weights (metric_for_best_model) at the end; needs save_strategy = eval_strategy."""
    data_seed: int | None = None
    """Seed of the data order alone (default: seed)."""
    dataloader_persistent_workers: bool = False
    """Keep DataLoader workers alive between epochs."""
    dataloader_prefetch_factor: int | None = None
    """Batches each DataLoader worker loads ahead."""
    dataloader_multiprocessing_context: str | None = None
    """How DataLoader workers start: fork, spawn or forkserver."""
    remove_unused_columns: bool = True
    """Drop the keys of dict samples that the model's forward does not take (labels are kept)."""
    label_names: list[str] | None = None
    """The keys of a dict sample that hold labels (default: labels, label, label_ids)."""
    torch_empty_cache_steps: int | None = None
    """Return cached device memory every this many optimizer steps."""
    local_rank: int = -1
    """Set by old launchers; braeburn reads LOCAL_RANK from the environment."""

    def __post_init__(self) -> None:
        _apply_aliases(self)
        # "~/runs/x" means the home folder, as in a shell (and in Transformers), not a folder named "~" here
        # (a config file or a quoted flag reaches us without the shell's expansion).
        for name in ("output_dir", "logging_dir", "resume_from_checkpoint"):
            setattr(self, name, _expand_home(getattr(self, name)))
        self.devices = _devices_value(self.devices)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling (``torch.load`` of a checkpoint's training_args.bin): a field added since the file was written
        gets its default, so reading it gives a value, not AttributeError."""
        self.__dict__.update({**_field_defaults(type(self)), **state})

    def validate(self) -> list[OptionError]:
        """Every problem with this config's own fields (device rules are the plan's)."""
        errors: list[OptionError] = self._range_errors()
        out_of_range = {error.option for error in errors}  # said once: the rules below would only repeat it

        def need(ok: bool, name: str, message: str) -> None:
            if not ok and name not in out_of_range:
                errors.append(OptionError(name, getattr(self, name), message))

        for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
                     "logging_steps", "save_steps"):
            need(getattr(self, name) >= 1, name, f"must be >= 1; pass --{name} 1 or more")
        need(self.learning_rate > 0, "learning_rate", "must be > 0, e.g. --learning_rate 5e-5")
        for name in ("weight_decay", "max_grad_norm", "warmup_steps", "dataloader_num_workers", "adam_epsilon"):
            need(getattr(self, name) >= 0, name, f"must be >= 0; pass --{name} 0 to turn it off")
        for name in ("adam_beta1", "adam_beta2"):
            need(0 <= getattr(self, name) < 1, name, "must be in [0, 1), e.g. 0.9")
        need(0 <= self.warmup_ratio < 1, "warmup_ratio", "must be in [0, 1), e.g. --warmup_ratio 0.1")
        need(self.max_steps == -1 or self.max_steps >= 1, "max_steps",
             "must be >= 1, or -1 to train for num_train_epochs")
        need(self.max_steps >= 1 or self.num_train_epochs > 0, "num_train_epochs",
             "must be > 0 (or set --max_steps)")
        need(self.eval_steps is None or self.eval_steps >= 1, "eval_steps", "must be >= 1 (or unset)")
        need(self.save_total_limit is None or self.save_total_limit >= 1, "save_total_limit",
             "must be >= 1, or unset to keep every checkpoint")
        need(self.lr_scheduler_type in SCHEDULERS, "lr_scheduler_type", f"choose one of {', '.join(SCHEDULERS)}, "
             "or pass your own scheduler: Trainer(optimizers=(optimizer, scheduler))")
        for name, choices in (("eval_strategy", STRATEGIES),
                              ("save_strategy", STRATEGIES), ("nan_policy", NAN_POLICIES)):
            need(getattr(self, name) in choices, name, f"choose one of {', '.join(choices)}")
        if "tensorboard" in (self.report_to or []) and not tensorboard_installed() and "report_to" not in out_of_range:
            errors.append(OptionError("report_to", "tensorboard", "needs the tensorboard package, which is not "
                                      "installed; pip install tensorboard, or pass --report_to all (TensorBoard when "
                                      "installed) or none"))  # the value that needs it, not the whole list
        need(self.fsdp_units in FSDP_UNITS, "fsdp_units", f"choose one of {', '.join(FSDP_UNITS)}")
        need(self.fsdp_units == "auto" or self.strategy != "ddp", "fsdp_units",
             "shapes FSDP's units, but --strategy is ddp; pass --strategy fsdp, or leave --fsdp_units at auto")
        need(str(self.step_breakdown).lower() in STEP_BREAKDOWN, "step_breakdown",
             f"choose one of {', '.join(STEP_BREAKDOWN)}")
        need(self.torch_compile_mode in COMPILE_MODES, "torch_compile_mode",
             f"choose one of {', '.join(str(m) for m in COMPILE_MODES[1:])} (or leave it unset)")
        need(bool(str(self.output_dir).strip()), "output_dir", "must name a folder, e.g. --output_dir outputs")
        need(not os.path.isfile(self.output_dir), "output_dir",
             f"is a file, not a folder; pass a folder path to {option('output_dir')} (or move the file)")
        need(self.optim in OPTIMIZERS, "optim", f"choose one of {', '.join(OPTIMIZERS)} (8-bit and other "
             "optimizers: pass Trainer(optimizers=(your_optimizer, None)))")
        need(self.logging_strategy in LOGGING_STRATEGIES, "logging_strategy",
             f"choose one of {', '.join(LOGGING_STRATEGIES)}")
        need(str(self.log_level).lower() in LOG_LEVELS, "log_level", f"choose one of {', '.join(LOG_LEVELS)}")
        need(0 <= self.label_smoothing_factor < 1, "label_smoothing_factor", "must be in [0, 1), e.g. 0.1")
        return errors + _combination_errors(self) + self._peer_errors()

    def _peer_errors(self) -> list[OptionError]:
        """A peer's own refusals (Transformers' TrainingArguments fields braeburn does not do): none here;
        ``braeburn.TrainingArguments`` adds them."""
        return []

    def _range_errors(self) -> list[OptionError]:
        """Numbers that no rule below can use: infinite or NaN floats, integers beyond what torch holds. The fix
        names each option as the caller sets it (option_spelling.py); where it has no way to, the advice is left out."""
        errors = []
        fields = self.__dataclass_fields__  # a subclass's too (braeburn.TrainingArguments')
        for name in _number_fields(self, ("float", float)):
            value, default = getattr(self, name), fields[name].default
            if isinstance(value, float) and not math.isfinite(value):
                errors.append(OptionError(name, value, f"must be a finite number, such as the default {default!r}"
                                          + advice("; pass {}", name, default)))
        for name in _number_fields(self, ("int", int, "int | None")):
            value, default = getattr(self, name), fields[name].default
            if isinstance(value, int) and not -INT64_MAX <= value <= INT64_MAX and name != "seed":
                errors.append(OptionError(name, value, "is beyond a 64-bit integer (torch counts steps and sizes in "
                                          "int64)" + advice("; pass {} or another sensible value", name, default)))
        if isinstance(self.seed, int) and not SEED_MIN <= self.seed <= SEED_MAX:
            errors.append(OptionError("seed", self.seed, f"is outside torch's seed range [{SEED_MIN}, {SEED_MAX}] "
                                      "(torch.manual_seed refuses it)"
                                      + advice("; pass {} or any number in that range", "seed", 42)))
        if isinstance(self.num_train_epochs, float) and math.isfinite(self.num_train_epochs) and \
                self.num_train_epochs > MAX_EPOCHS:
            errors.append(OptionError("num_train_epochs", self.num_train_epochs, f"is more than {MAX_EPOCHS:,.0f} "
                                      "passes over the data, which no run finishes; pass "
                                      f"{option('num_train_epochs', 3)}, or {option('max_steps', 'N')} to train for "
                                      "N optimizer steps"))
        if isinstance(self.dataloader_num_workers, int) and self.dataloader_num_workers > MAX_DATALOADER_WORKERS:
            errors.append(OptionError("dataloader_num_workers", self.dataloader_num_workers, f"starts more than "
                                      f"{MAX_DATALOADER_WORKERS} worker processes per training process; pass "
                                      f"{option('dataloader_num_workers', '0 to 8')} (about the CPU cores per "
                                      "process)"))
        return errors

    @property
    def shuffles_training(self) -> bool:
        """Whether the training loader shuffles (a hook: a peer's arguments may read it from their own option)."""
        return True

    @property
    def quiet_third_party(self) -> bool:
        """Hold back third-party output: not with --verbose, nor with --log_level info or debug."""
        return not (self.verbose or str(self.log_level).lower() in ("info", "debug"))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def to_sanitized_dict(self) -> dict[str, Any]:
        """Numbers, strings and booleans only (others as text): what trackers store as hyperparameters."""
        return {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in self.to_dict().items()}

    def run_options(self, num_processes: int = 1) -> RunOptions:
        """The device/precision/compile requests, as the plan reads them."""
        return RunOptions(accelerator=self.accelerator, devices=self.devices, cpu=self.use_cpu,
                          mixed_precision=self.mixed_precision, compile=compile_value(self.compile),
                          num_processes=num_processes, strategy=self.strategy)

    def accelerator_options(self) -> dict[str, Any]:
        """The Accelerator's keyword arguments for this config."""
        return {"cpu": self.use_cpu, "mixed_precision": self.mixed_precision,
                "gradient_accumulation_steps": self.gradient_accumulation_steps, "accelerator": self.accelerator,
                "devices": self.devices, "compile": compile_value(self.compile), "strategy": self.strategy,
                "seed": self.seed, "compile_backend": self.torch_compile_backend,
                "compile_mode": self.torch_compile_mode, "fsdp_units": self.fsdp_units}

    def warmup_for(self, total_steps: int) -> int:
        """Warmup steps: warmup_steps if set, else warmup_ratio of ``total_steps``, rounded up as Transformers does."""
        if self.warmup_steps >= 1:
            return int(self.warmup_steps)
        ratio = self.warmup_steps if self.warmup_steps > 0 else self.warmup_ratio
        return math.ceil(total_steps * ratio)


INT64_MAX = 2**63 - 1
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # what torch.manual_seed accepts
MAX_EPOCHS = 1e6
MAX_DATALOADER_WORKERS = 256


def _field_defaults(config_type: type) -> dict[str, Any]:
    """Each field's default (its factory's value), for the fields that have one."""
    return {f.name: f.default_factory() if f.default is dataclasses.MISSING else f.default
            for f in dataclasses.fields(config_type)
            if f.init and not (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)}


def _number_fields(config: CoreTrainingConfig, types: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(name for name, f in config.__dataclass_fields__.items() if f.type in types)


def _json_field(config: Any, name: str) -> None:
    value = getattr(config, name)
    if isinstance(value, str) and value.strip():
        try:
            setattr(config, name, json.loads(value))
        except ValueError:
            pass  # _combination_errors reports it


def _apply_aliases(config: Any) -> None:
    """Transformers' spellings (bf16, fp16, torch_compile, fsdp, activation_checkpointing) onto braeburn's options,
    and the defaults that follow from other fields, in place (idempotent; never raises)."""
    if config.bf16 and not config.fp16 and config.mixed_precision == "auto":
        config.mixed_precision = "bf16"
    if config.fp16 and not config.bf16 and config.mixed_precision == "auto":
        config.mixed_precision = "fp16"
    if config.torch_compile is not None and config.compile == "auto":
        config.compile = "true" if config.torch_compile else "false"
    if config.fsdp and config.strategy == "auto":
        config.strategy = "fsdp"
    if config.fsdp and config.fsdp_units == "auto":
        config.fsdp_units = "block"  # Transformers' fsdp wraps each block (its auto_wrap_policy's default)
    if (config.load_best_model_at_end or config.lr_scheduler_type == "reduce_lr_on_plateau") and \
            config.metric_for_best_model is None:
        config.metric_for_best_model = "loss"  # Transformers' default when the best model (or a plateau) needs one
    if config.greater_is_better is None and config.metric_for_best_model is not None:
        config.greater_is_better = not str(config.metric_for_best_model).endswith("loss")
    if config.activation_checkpointing:
        config.gradient_checkpointing = True
    if config.activation_checkpointing_kwargs is not None and config.gradient_checkpointing_kwargs is None:
        config.gradient_checkpointing_kwargs = config.activation_checkpointing_kwargs
    if isinstance(config.report_to, str):
        config.report_to = [config.report_to]
    if isinstance(config.label_names, str):
        config.label_names = [config.label_names]
    for name in ("gradient_checkpointing_kwargs", "lr_scheduler_kwargs"):
        _json_field(config, name)
    if config.eval_strategy == "steps" and config.eval_steps is None and config.logging_steps == 50:
        note_once("--eval_strategy steps without --eval_steps evaluates every logging_steps, as Transformers "
                   "does, but braeburn's default logging_steps is 50 (Transformers': 500), so it evaluates every "
                   "50 steps; pass --eval_steps 500 for Transformers' cadence.")
    if config.use_mps_device:
        note_once("--use_mps_device is deprecated in Transformers and not needed: braeburn (like Transformers) "
                   "trains on the Mac's GPU (mps) by default when it is usable; --accelerator mps insists on it.")


def _combination_errors(config: Any) -> list[OptionError]:
    """Conflicts between Transformers' spellings and braeburn's options, and the rules that need several fields."""
    errors: list[OptionError] = []
    if config.bf16 and config.fp16:
        errors.append(OptionError("bf16", True, "and --fp16 both set; choose one"))
    for flag, precision in (("bf16", "bf16"), ("fp16", "fp16")):
        # "auto" is the default, not a choice: with both --fp16 and --bf16 it stays "auto", and the error above says all
        if getattr(config, flag) and config.mixed_precision not in (precision, "auto"):
            errors.append(OptionError(flag, True, f"conflicts with --mixed_precision {config.mixed_precision}; "
                                      "pass one of them"))
    for name in ("gradient_checkpointing_kwargs", "lr_scheduler_kwargs"):
        value = getattr(config, name)
        if value is not None and not isinstance(value, dict):
            errors.append(OptionError(name, value, 'must be a JSON object, e.g. {"use_reentrant": false}'))
    if config.fsdp and "offload" in str(config.fsdp):
        errors.append(OptionError("fsdp", config.fsdp, "CPU offload is not supported; pass --fsdp full_shard"))
    errors += _wsd_errors(config)
    if config.lr_scheduler_type == "reduce_lr_on_plateau" and config.eval_strategy == "no":
        errors.append(OptionError("lr_scheduler_type", "reduce_lr_on_plateau", "steps after each evaluation, on "
                                  "metric_for_best_model: pass --eval_strategy epoch (or steps)"))
    if config.load_best_model_at_end:
        if config.eval_strategy == "no":
            errors.append(OptionError("load_best_model_at_end", True, "needs evaluations: pass --eval_strategy "
                                      "epoch (or steps) and the same --save_strategy"))
        elif config.save_strategy != config.eval_strategy:
            errors.append(OptionError("load_best_model_at_end", True, f"needs --save_strategy to match --eval_strategy "
                                      f"({config.save_strategy} vs {config.eval_strategy}), so that every evaluated "
                                      "model is saved"))
        elif config.eval_strategy == "steps" and config.save_steps % (config.eval_steps or config.logging_steps):
            errors.append(OptionError("save_steps", config.save_steps, "must be a multiple of eval_steps with "
                                      "--load_best_model_at_end"))
    for name in ("dataloader_prefetch_factor", "torch_empty_cache_steps", "eval_accumulation_steps"):
        value = getattr(config, name)
        if value is not None and value < 1:
            errors.append(OptionError(name, value, "must be >= 1 (or unset)"))
    if config.dataloader_prefetch_factor is not None and config.dataloader_num_workers == 0:
        errors.append(OptionError("dataloader_prefetch_factor", config.dataloader_prefetch_factor,
                                  "needs --dataloader_num_workers 1 or more"))
    from ..accelerator.trackers import TRACKERS, is_available

    for name in config.report_to or []:
        if name is None:  # report_to=None, stored as [None] as Transformers stores it (its Trainer refuses it too)
            errors.append(OptionError("report_to", None, "is stored as [None], as in Transformers, and names no "
                                      "tracker; pass report_to='none' for none"))
        elif name not in TRACKERS and name not in ("all", "none"):
            errors.append(OptionError("report_to", name, f"choose from none, all, {', '.join(TRACKERS)}"))
        elif name in TRACKERS and name != "tensorboard" and not is_available(name):  # tensorboard: config.py says it
            errors.append(OptionError("report_to", name, f"needs the {TRACKERS[name][1]} package, which is not "
                                      f"installed; pip install {TRACKERS[name][1]}, or pass --report_to all or none"))
    return errors


def _wsd_errors(config: Any) -> list[OptionError]:
    """warmup_stable_decay needs num_decay_steps and known shapes, as Transformers' get_wsd_schedule does."""
    kwargs = config.lr_scheduler_kwargs if isinstance(config.lr_scheduler_kwargs, dict) else {}
    if config.lr_scheduler_type != "warmup_stable_decay":
        return []
    errors = []
    if not isinstance(kwargs.get("num_decay_steps"), int):
        errors.append(OptionError("lr_scheduler_kwargs", config.lr_scheduler_kwargs, "warmup_stable_decay needs "
                                  'num_decay_steps, e.g. --lr_scheduler_kwargs \'{"num_decay_steps": 100}\''))
    for name in ("warmup_type", "decay_type"):
        if kwargs.get(name, "linear") not in ("linear", "cosine", "1-sqrt"):
            errors.append(OptionError("lr_scheduler_kwargs", kwargs[name], f"{name} must be linear, cosine or 1-sqrt"))
    return errors


def plan_errors(config: CoreTrainingConfig) -> list[OptionError]:
    """Ask the plan whether this machine can do what ``config`` asks (device, precision, compile)."""
    from ..devices.host import current_host
    from ..plan.envvars import env_device
    from ..plan.rules import PlanError, make_plan

    options = config.run_options()
    options = RunOptions(**{**options.__dict__, "env_device": env_device()})
    try:
        make_plan(options, current_host())
    except PlanError as error:
        return list(error.errors)
    return []


def parse_config(*dataclass_types: type, argv: list[str] | None = None, exit_on_error: bool = True,
                 check_plan: bool = True) -> tuple[Any, ...]:
    """One parser for several config dataclasses, like Transformers' HfArgumentParser.

    ``--learning_rate 2e-5`` (or ``--learning-rate``), booleans as ``--do_train`` / ``--no_do_train``
    / ``--do_train false``, ``--config FILE`` (TOML or YAML) filling the same fields, with the
    command line winning. Every unknown option, wrong type and invalid value is reported in one
    error. With ``exit_on_error`` (the default for scripts) that error is printed and the process
    exits with status 2, as argparse does; otherwise :class:`ConfigError` is raised.
    """
    try:
        instances, errors = parse_dataclasses(dataclass_types, argv)
        for instance in instances:
            if hasattr(instance, "validate"):
                errors.extend(instance.validate())
            if check_plan and isinstance(instance, CoreTrainingConfig):
                errors.extend(plan_errors(instance))
        if errors:
            raise ConfigError(errors)
    except ConfigError as error:
        if not exit_on_error:
            raise
        import sys

        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    return instances


def __getattr__(name: str) -> Any:
    """The public class at its path from before the layout (``braeburn.trainer.config.TrainingConfig``
    is ``braeburn.TrainingConfig``; this module's class is CoreTrainingConfig): see braeburn.trainer.PUBLIC_NAMES."""
    from . import public

    return public(f"config.{name}")


__all__ = ["ConfigError", "CoreTrainingConfig", "parse_config", "plan_errors"]
