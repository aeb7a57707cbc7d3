"""The extension's precision: where the device kind leaves the choice to a measurement
(``DeviceKind.auto_precision_candidates``: on a Mac no precision is fastest on every chip) and the Trainer trains in
Lightning's default ``32-true``, time the user's own ``training_step`` in float32 and each candidate on the first
batch (braeburn.plan.precision_trial: interleaved rounds, every window from the same weights, optimizer state and
random state, all put back), and switch Lightning's precision plugin to the winner. Any other precision the Trainer
was given is kept, as asked. On a device with nothing to measure (the CPU, CUDA) Lightning's precision stays.
"""

from __future__ import annotations

import gc
import math
from typing import Any, Callable

import torch

from ...checkpoints import state as state_io
from ...devices.base import DeviceKind
from ...devices.host import HostFacts
from ...plan.precision import make_policy
from ...plan.precision_trial import Snapshot, decide, measure_reason, run_trials
from .module import step_loss

DEFAULT = "32-true"  # Lightning's precision when none is given (and float32 when it is given so)
LIGHTNING_NAMES = {"bf16": "bf16-mixed", "fp16": "16-mixed", "no": "32-true"}
KEEP = "Braeburn(precision='keep') keeps Lightning's precision without measuring"
RESUMED = "as measured by the run this resumes: its checkpoint's Braeburn entry"


def candidates(kind: DeviceKind, host: HostFacts, optimizers: list[Any]) -> tuple[str, ...]:
    """The mixed precisions worth timing here: none where a fused optimizer would ignore fp16's grad scaler."""
    found = kind.auto_precision_candidates(host)
    fused = any(getattr(o, "defaults", {}).get("fused") for o in optimizers)
    if fused and not kind.fused_optimizers_honour_grad_scaler(host):
        found = tuple(c for c in found if not kind.precision_support(c, host).needs_grad_scaler)
    usable = []
    for candidate in found:
        support = kind.precision_support(candidate, host)
        if support.supported and (support.grad_scaler_supported or not support.needs_grad_scaler):
            usable.append(candidate)
    return tuple(usable)


def why_not_measured(trainer: Any, found: tuple[str, ...]) -> str | None:
    """Why this fit is not measured (None: it is)."""
    if trainer.precision != DEFAULT:
        return f"precision={trainer.precision!r} as asked"
    if not found:
        return "the device leaves no precision to measure"
    if not trainer.lightning_module.automatic_optimization or len(trainer.optimizers) != 1:
        return "a trial times one optimizer under automatic optimization"
    why = measure_reason(_remaining(trainer), trainer.world_size, False, len(found), trainer.accumulate_grad_batches)
    # (the trial's advice names braeburn's option; a Lightning user passes the Trainer's)
    return None if why is None else why.replace("mixed_precision='bf16' or 'fp16'",
                                                "lightning.Trainer(precision='bf16-mixed') or '16-mixed'")


def measure(trainer: Any, module: Any, kind: DeviceKind, found: tuple[str, ...]) -> tuple[str, str]:
    """(the precision chosen, "no" for float32; the line that says so), from a trial on the first batch."""
    optimizer = trainer.optimizers[0]
    rng = state_io.rng_state(kind)  # before the batch is read: the sampler's draw is made again by the run
    loader_generators = _loader_generators(trainer.train_dataloader)  # (a loader's own generator, likewise)
    was_logging = module.__dict__.get("log"), module.__dict__.get("log_dict")
    module.log = module.log_dict = _not_logged  # the trial's steps log nothing into Lightning's results
    try:
        batch = trainer.strategy.batch_to_device(next(iter(trainer.train_dataloader)))
        snapshot = Snapshot(module, optimizer, rng, lambda saved: state_io.set_rng_state(saved, kind))
        module.train()
        trials, stopped = run_trials(("no", *found), _starter(module, optimizer, batch, trainer),
                                     snapshot, kind.synchronize, kind.is_out_of_memory, kind.empty_cache,
                                     _remaining(trainer), accumulation=trainer.accumulate_grad_batches)
    finally:
        _restore_logging(module, was_logging)
        state_io.set_rng_state(rng, kind)
        for generator, state in loader_generators:
            generator.set_state(state)
        batch = snapshot = None
        gc.collect()
        kind.empty_cache()
    decision = decide(trials, stopped)
    return decision.precision, f"timed on your model: {decision.table}: {decision.reason}"


def _loader_generators(loaders: Any) -> list[tuple[torch.Generator, torch.Tensor]]:
    """Each torch.Generator the training loader(s) draw from (the DataLoader's ``generator=``, its sampler's or its
    batch sampler's), with its state: reading the trial's batch draws from it, and the run must draw the same."""
    found: dict[int, tuple[torch.Generator, torch.Tensor]] = {}
    items = loaders.values() if isinstance(loaders, dict) else loaders if isinstance(loaders, (list, tuple)) else \
        [loaders]
    for loader in items:
        sampler = getattr(loader, "sampler", None)
        batch_sampler = getattr(loader, "batch_sampler", None)
        for owner in (loader, sampler, batch_sampler, getattr(batch_sampler, "sampler", None)):
            generator = getattr(owner, "generator", None)
            if isinstance(generator, torch.Generator):
                found[id(generator)] = (generator, generator.get_state())
    return list(found.values())


def _not_logged(*args: Any, **kwargs: Any) -> None:
    return None


def _restore_logging(module: Any, was: tuple[Any, Any]) -> None:
    for name, value in zip(("log", "log_dict"), was):
        if value is None:
            module.__dict__.pop(name, None)
        else:
            module.__dict__[name] = value


def _remaining(trainer: Any) -> int:
    remaining = trainer.estimated_stepping_batches
    return 10**9 if not math.isfinite(remaining) else int(remaining)


def _starter(module: Any, optimizer: Any, batch: Any, trainer: Any) -> Callable[[str], Callable[[], tuple]]:
    """``start(precision)`` for run_trials: one policy (and grad scaler) per precision for the whole trial."""
    device = trainer.strategy.root_device
    policies: dict[str, Any] = {}

    def start(precision: str) -> Callable[[], tuple[torch.Tensor, bool]]:
        if precision not in policies:
            policies[precision] = make_policy(precision, precision == "fp16", device)
        policy = policies[precision]

        def step() -> tuple[torch.Tensor, bool]:
            with policy.autocast():
                loss = step_loss(module.training_step(batch, 0), "training_step")
            policy.backward(loss)
            policy.unscale_(optimizer)
            _clip_as_lightning(module, optimizer, trainer)
            applied = policy.step(optimizer)
            optimizer.zero_grad(set_to_none=True)
            return loss.detach(), applied
        return step
    return start


def _clip_as_lightning(module: Any, optimizer: Any, trainer: Any) -> None:
    """Clip as Lightning's loop does before each step: the module's ``configure_gradient_clipping`` hook with the
    Trainer's value and algorithm, by default Lightning's precision plugin clipping the optimizer's parameters
    (``main_params(optimizer)``, not the module's), by norm or by value."""
    module.configure_gradient_clipping(optimizer, gradient_clip_val=trainer.gradient_clip_val,
                                       gradient_clip_algorithm=trainer.gradient_clip_algorithm)


def lightning_plugin(package: Any, precision: str, device_type: str) -> Any:
    """Lightning's own precision plugin for braeburn's ``precision`` ("bf16" or "fp16")."""
    return package.plugins.precision.MixedPrecision(LIGHTNING_NAMES[precision], device=device_type)


__all__ = ["DEFAULT", "KEEP", "LIGHTNING_NAMES", "RESUMED", "candidates", "lightning_plugin", "measure",
           "why_not_measured"]
