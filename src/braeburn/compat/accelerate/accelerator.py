"""``braeburn.Accelerator``: braeburn's Accelerator (``braeburn.accelerator.core``) with Accelerate's other names
(:class:`~braeburn.compat.accelerate.api.AccelerateCompat`) and Accelerate's ``Accelerator(...)`` arguments: the
ones braeburn's core does not have are translated, accepted or refused (``options``), and the ACCELERATE_*
variables apply as Accelerate applies them.
"""

from __future__ import annotations

from typing import Any

from ...accelerator import core
from ...accelerator.core import say_once
from ...plan.envvars import COMPILE_VAR, MIXED_PRECISION_VAR, env_default
from ...plan.rules import OptionError, compile_value
from .environment import AccelerateEnv, accelerate_env
from .api import AccelerateCompat, GradientAccumulationPlugin
from .options import NotSupportedError, accelerate_options
from .state import DynamoBackend, TorchDynamoPlugin


class Accelerator(AccelerateCompat, core.Accelerator):
    """Make a hand-written training loop run on the best device, with the right precision, on 1..N processes.

    Every argument left at "auto" is resolved by :func:`braeburn.plan.rules.make_plan` (the launcher's
    BRAEBURN_* variables fill them first); an impossible choice raises :class:`PlanError` listing all.
    Accelerate's own arguments (``log_with``, ``project_config``, ``kwargs_handlers``, ...) are taken as there
    (docs/migrating.md says where braeburn differs).
    """

    def __init__(self, cpu: bool = False, mixed_precision: Any = "auto", gradient_accumulation_steps: int = 1,
                 accelerator: str = "auto", devices="auto", strategy: str = "auto", compile="auto",
                 seed: int | None = None, mps_fallback: bool = True, step_scheduler_with_optimizer: bool = True,
                 compile_backend: str = "inductor", compile_mode: str | None = None, *, fsdp_units: str = "auto",
                 **accelerate_kwargs: Any):
        dynamo_given = accelerate_kwargs.get("dynamo_backend") is not None
        try:
            accelerate = accelerate_options(mixed_precision, accelerate_kwargs, compile)
        except NotSupportedError as error:  # with the ACCELERATE_DYNAMO_* refusals, so that all are said at once
            raise NotSupportedError([*error.errors, *_dynamo_refusals(compile, accelerate_kwargs)]) from None
        compile = _regional_from_env(accelerate.compile, compile) if dynamo_given else accelerate.compile
        cpu, mixed_precision, gradient_accumulation_steps, compile, compile_mode = _with_accelerate_env(
            cpu, accelerate.mixed_precision, gradient_accumulation_steps, accelerate.accumulation_steps, compile,
            compile_mode, dynamo_given)
        self._init_accelerate_compat(**accelerate.tracking)
        super().__init__(cpu, mixed_precision, gradient_accumulation_steps, accelerator, devices, strategy, compile,
                         seed, mps_fallback, step_scheduler_with_optimizer, compile_backend, compile_mode,
                         data_seed=accelerate.data_seed, ddp_options=accelerate.ddp_options,
                         process_group_timeout=accelerate.process_group_timeout, fsdp_units=fsdp_units)
        self._dynamo_plugin = _dynamo_plugin(self.plan, self.compile_mode, accelerate_env())


def _with_accelerate_env(cpu: bool, mixed_precision: str, steps: int, plugin_steps: int | None, compile: Any,
                         compile_mode: str | None, dynamo_given: bool) -> tuple[bool, str, int, Any, str | None]:
    """The constructor's options with the ACCELERATE_* variables applied as Accelerate 1.15 applies them:
    ACCELERATE_USE_CPU forces the CPU; ACCELERATE_MIXED_PRECISION and ACCELERATE_DYNAMO_* fill only what the
    call (and BRAEBURN_*) left unset; ACCELERATE_GRADIENT_ACCUMULATION_STEPS replaces the argument unless a
    GradientAccumulationPlugin is given. Unsupported ones are said once, with the fix."""
    env = accelerate_env()
    for note in env.notes:
        say_once(f"braeburn: {note}", as_warning=True)
    if env.mixed_precision is not None and env_default(MIXED_PRECISION_VAR, mixed_precision) == "auto":
        mixed_precision = env.mixed_precision
    if plugin_steps is not None:
        steps = plugin_steps
    elif env.gradient_accumulation_steps is not None:
        if steps not in (1, env.gradient_accumulation_steps):
            say_once(f"braeburn: ACCELERATE_GRADIENT_ACCUMULATION_STEPS={env.gradient_accumulation_steps} replaces "
                     f"gradient_accumulation_steps={steps}, as in Accelerate; unset the variable to use the argument",
                     as_warning=True)
        steps = env.gradient_accumulation_steps
    if env.compile and not dynamo_given and env_default(COMPILE_VAR, compile) == "auto":
        compile = env.compile
    if compile_value(compile) in (True, "regional"):  # compiling as asked: by the variables, dynamo_backend=
        # "inductor" or compile=True (a Trainer's torch_compile=True): Accelerate's TorchDynamoPlugin reads
        # ACCELERATE_DYNAMO_MODE/USE_FULLGRAPH/USE_DYNAMIC whichever way its backend was given
        compile_mode = compile_mode or env.compile_mode
        _check_dynamo_options(env)
    return cpu or env.cpu, mixed_precision, steps, compile, compile_mode


def _check_dynamo_options(env: AccelerateEnv) -> None:
    """Where braeburn compiles as Accelerate's backend asks: refuse the ACCELERATE_DYNAMO_* values it cannot
    honour, all at once, and say the ones whose difference changes no result."""
    if env.dynamo_refusals:
        raise NotSupportedError([OptionError(name, value, why) for name, value, why in env.dynamo_refusals])
    for note in env.dynamo_notes:
        say_once(f"braeburn: {note}", as_warning=True)


def _dynamo_refusals(compile: Any, accelerate_kwargs: dict[str, Any]) -> list[OptionError]:
    """The ACCELERATE_DYNAMO_* refusals where the call would compile (compile=True/"regional", dynamo_backend=
    "inductor", or ACCELERATE_DYNAMO_BACKEND=INDUCTOR beside compile left at auto), for an error that stops
    the call before _with_accelerate_env reads them."""
    env, dynamo = accelerate_env(), accelerate_kwargs.get("dynamo_backend")
    backend = None if dynamo is None else str(getattr(dynamo, "value", dynamo)).strip().lower()
    compiles = compile_value(compile) in (True, "regional") or backend == "inductor" or (
        backend is None and bool(env.compile) and env_default(COMPILE_VAR, compile) == "auto")
    return [OptionError(name, value, why) for name, value, why in env.dynamo_refusals] if compiles else []


def _dynamo_plugin(plan: Any, compile_mode: str | None, env: AccelerateEnv) -> TorchDynamoPlugin:
    """``accelerator.state.dynamo_plugin``: the TorchDynamoPlugin Accelerate would hold for these settings (backend
    INDUCTOR where compiling was asked, NO for compile=False or "auto", which decides per model)."""
    asked = plan.compile and not plan.compile_auto
    return TorchDynamoPlugin(backend=DynamoBackend.INDUCTOR if asked else DynamoBackend.NO,
                             mode=compile_mode or env.dynamo_mode, fullgraph=env.fullgraph, dynamic=env.dynamic,
                             use_regional_compilation=bool(plan.compile_regional) or env.regional_compilation)


def _regional_from_env(compile: Any, asked: Any) -> Any:
    """``Accelerator(dynamo_backend="inductor")`` with ``compile`` left unset compiles by regions where the launcher
    asked for regional compilation, as Accelerate's TorchDynamoPlugin reads ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION
    beside a backend given in code (``braeburn launch --compile regional`` asks it with BRAEBURN_COMPILE)."""
    if compile is not True or asked != "auto":
        return compile
    launched = env_default(COMPILE_VAR, "auto")
    return "regional" if accelerate_env().regional_compilation or launched.lower() == "regional" else compile


def accumulation_as_plugin(options: dict[str, Any]) -> dict[str, Any]:
    """Accelerator keyword arguments (``TrainingConfig.accelerator_options()``) with gradient_accumulation_steps
    passed as a GradientAccumulationPlugin, as the Transformers Trainer passes its accumulation to Accelerate:
    ACCELERATE_GRADIENT_ACCUMULATION_STEPS then does not replace it. Options without it are returned as given."""
    if "gradient_accumulation_steps" not in options:
        return options
    options = dict(options)
    steps = options.pop("gradient_accumulation_steps")
    return {**options, "gradient_accumulation_plugin": GradientAccumulationPlugin(num_steps=steps)}


__all__ = ["Accelerator", "accumulation_as_plugin"]
