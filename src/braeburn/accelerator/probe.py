"""Hook points that `braeburn check` (and `braeburn bench script.py`) use to watch a user's own run.

The Accelerator calls three hooks. They do nothing unless BRAEBURN_CHECK_DIR is set, which only
`braeburn check` and `braeburn bench` do, in the child runs they start:

- ``after_prepare(accelerator, models)``: the reference run (CPU, float32) saves each model's
  initial weights; the accelerator run, started after the reference run has finished, loads them,
  so both start from identical weights. Both then seed every generator from BRAEBURN_SEED (so the
  same batches come out of a seeded shuffle) and set the ``p`` of every ``nn.Dropout*`` module to
  0 (the CPU and a GPU draw different random masks from the same seed).
- ``after_backward(accelerator, loss)``: records the loss.
- ``before_optimizer_step(accelerator, optimizer)``: records the step time (after a device
  synchronize) and every parameter's gradient (as CPU float32). The reference run saves the
  gradients; the accelerator run compares its own with them at once (see :func:`compare_gradients`),
  so no run ever holds more than one step of both, and then steps with the reference's gradients,
  so that both runs keep (nearly) the same weights and each step measures only its own kernels. After BRAEBURN_CHECK_STEPS steps the run writes
  ``record.json`` and stops with :class:`CheckStepsDone` (a ``SystemExit`` with status 0).

Gradients are read as they are when the optimizer step begins: the Accelerator must have unscaled
them already when a grad scaler is in use.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from ..plan.envvars import (CHECK_DIR_VAR, CHECK_REFERENCE_VAR, CHECK_SIDE_VAR, CHECK_STEPS_VAR, CHECK_TARGET_VAR,
                      SEED_VAR)

RECORD_FILE = "record.json"
DEFAULT_STEPS = 5
DEFAULT_SEED = 1234
WORST_PARAMETERS = 5  # how many of the most-disagreeing parameters a step keeps


class CheckStepsDone(SystemExit):
    """Raised by the probe once the asked number of steps is recorded: the checked run ends here."""

    def __init__(self) -> None:
        super().__init__(0)


def active() -> bool:
    return bool(os.environ.get(CHECK_DIR_VAR))


# -- pure helpers (tested directly) ---------------------------------------------------------


def relative_error(value: float, reference: float) -> float:
    if math.isnan(value) or math.isnan(reference):
        return math.inf
    return abs(value - reference) / max(abs(reference), 1e-12)


def compare_gradients(reference: dict, other: dict) -> dict:
    """Per-parameter norm-wise relative error ``|g - g_ref| / |g_ref|`` and the summary of a step.

    The norm-wise error does not blow up on single elements near zero, as an elementwise ratio
    would. A parameter whose reference gradient is (almost) zero is measured against a floor of
    1e-6 times the largest reference gradient norm of the step.
    """
    import torch

    ref_norms = {name: float(torch.linalg.vector_norm(g)) for name, g in reference.items()}
    floor = 1e-6 * max(ref_norms.values(), default=0.0) or 1e-12
    errors, nonfinite, diff_sq, ref_sq = {}, [], 0.0, 0.0
    for name, ref in reference.items():
        if name not in other:
            continue
        grad = other[name].to(ref.dtype)
        if grad.shape != ref.shape or not bool(torch.isfinite(grad).all()):
            nonfinite.append(name)
            errors[name] = math.inf
            continue
        diff = float(torch.linalg.vector_norm(grad - ref))
        errors[name] = diff / max(ref_norms[name], floor)
        diff_sq, ref_sq = diff_sq + diff**2, ref_sq + ref_norms[name] ** 2
    worst = sorted(errors.items(), key=lambda item: item[1], reverse=True)[:WORST_PARAMETERS]
    return {"max_rel": max(errors.values(), default=0.0), "global_rel": math.sqrt(diff_sq) / max(math.sqrt(ref_sq), 1e-12),
            "worst": [[name, err] for name, err in worst], "nonfinite": nonfinite,
            "missing": sorted(set(reference) ^ set(other))}


def _json_number(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


# -- the recorder of one checked run ----------------------------------------------------------


def _kind_of(accelerator, models):
    """The device kind the run uses: the accelerator's plan, its torch device, or the weights'."""
    from ..devices.registry import get_kind

    plan = getattr(accelerator, "plan", None)
    if plan is not None and hasattr(plan, "device") and hasattr(plan.device, "synchronize"):
        return plan.device
    device = getattr(accelerator, "device", None)
    if device is None:
        device = next((p.device for m in models for p in m.parameters()), None)
    return get_kind(getattr(device, "type", "cpu"))


def _precision_of(accelerator) -> str | None:
    plan = getattr(accelerator, "plan", None)
    for value in (getattr(plan, "precision", None), getattr(accelerator, "mixed_precision", None)):
        if isinstance(value, str):
            return value
    return None


def _unscale(accelerator, optimizer) -> None:
    """fp16: divide the gradients by the grad scaler's scale, as the optimizer step would.

    ``GradScaler.unscale_`` records that it ran, so the step that follows does not unscale twice;
    a second call in the same step raises, which means the Accelerator already unscaled (clipping).
    """
    scaler = getattr(accelerator, "scaler", None)
    if scaler is None or not getattr(scaler, "is_enabled", lambda: False)():
        return
    try:
        scaler.unscale_(optimizer)
    except RuntimeError as error:
        if "unscale_() has already been called" not in str(error):
            raise


class _Float64Watch:
    """Counts torch calls that produce float64 tensors, for a device without float64.

    A TorchFunctionMode costs a Python call per torch op, so it is only on during the first step,
    which is a warm-up step that no timing uses.
    """

    def __init__(self, counts: dict[str, int]):
        import torch
        from torch.overrides import TorchFunctionMode

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                result = func(*args, **(kwargs or {}))
                if isinstance(result, torch.Tensor) and result.dtype == torch.float64:
                    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
                    counts[name] = counts.get(name, 0) + 1
                return result

        self.mode = Mode()
        self.mode.__enter__()

    def stop(self) -> None:
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.mode = None


class _Recorder:
    def __init__(self, env: dict[str, str]):
        self.directory = Path(env[CHECK_DIR_VAR])
        self.directory.mkdir(parents=True, exist_ok=True)
        self.side = env.get(CHECK_SIDE_VAR, "reference")
        self.steps = int(env.get(CHECK_STEPS_VAR) or DEFAULT_STEPS)
        reference = env.get(CHECK_REFERENCE_VAR)
        self.reference = Path(reference) if reference else None
        self.target = env.get(CHECK_TARGET_VAR)
        self.seed = int(env.get(SEED_VAR) or DEFAULT_SEED)
        self.kind = None
        self.names: dict[int, str] = {}
        self.models: list = []
        self.step_losses: list[float] = []
        self.float64_ops: dict[str, int] = {}
        self.watch: _Float64Watch | None = None
        self.clock = time.perf_counter()
        self.record: dict[str, Any] = {"side": self.side, "steps_requested": self.steps, "steps": [],
                                       "stopped_by_check": False, "float64": [], "dropout_disabled": [],
                                       "initial_weights": None}
        self.written = False
        atexit.register(self.write)

    # after_prepare ------------------------------------------------------------------------
    def add_models(self, accelerator, models: list) -> None:
        if self.kind is None:
            self.kind = _kind_of(accelerator, models)
            self.record.update(device=self.kind.name, precision=_precision_of(accelerator))
        for model in models:
            index = len(self.models)
            self.models.append(model)
            for name, param in model.named_parameters():
                self.names.setdefault(id(param), f"model{index}.{name}" if index else name)
            if self.side != "bench":  # bench only times the script as it is
                self._share_initial_weights(index, model)
                self._disable_dropout(index, model)
            self._scan_float64(index, model)
        if self.side != "bench":
            self._seed()
        if self.watch is None and not self.record["steps"] and self._target_lacks_float64():
            self.watch = _Float64Watch(self.float64_ops)
        self._restart_clock()

    def _share_initial_weights(self, index: int, model) -> None:
        import torch

        if self.side == "reference":
            torch.save(model.state_dict(), self.directory / f"init_{index}.pt")
            self.record["initial_weights"] = "saved"
        elif self.reference is not None:
            path = self.reference / f"init_{index}.pt"
            if not path.exists():
                raise RuntimeError(f"braeburn check: the reference run saved no initial weights for model "
                                   f"{index} ({path} is missing): the script prepared a different number of "
                                   "models on the two sides. Prepare the same models whatever the device")
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
            self.record["initial_weights"] = "loaded from the reference run"

    def _disable_dropout(self, index: int, model) -> None:
        import torch.nn as nn

        kinds = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
        for name, module in model.named_modules():
            if isinstance(module, kinds) and module.p > 0:
                module.p = 0.0
                self.record["dropout_disabled"].append(f"model{index}.{name}" if index else name)

    def _scan_float64(self, index: int, model) -> None:
        import torch

        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if tensor.dtype == torch.float64:
                self.record["float64"].append(f"weight {f'model{index}.' if index else ''}{name} is float64")

    def _target_lacks_float64(self) -> bool:
        from ..devices.registry import get_kind

        try:
            return not get_kind(self.target).supports_float64 if self.target else False
        except KeyError:
            return False

    def _seed(self) -> None:
        import torch

        random.seed(self.seed)
        torch.manual_seed(self.seed)
        self.kind.manual_seed(self.seed)
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed(self.seed)

    def _restart_clock(self) -> None:
        if self.kind is not None:
            self.kind.synchronize()
        self.clock = time.perf_counter()

    # after_backward -----------------------------------------------------------------------
    def add_loss(self, loss) -> None:
        import torch

        if isinstance(loss, torch.Tensor):
            if loss.dtype == torch.float64 and "loss is float64" not in self.record["float64"]:
                self.record["float64"].append("loss is float64")
            loss = loss.detach().float().item()  # a device sync, outside nothing that is timed alone
        self.step_losses.append(float(loss))

    # before_optimizer_step ----------------------------------------------------------------
    def add_step(self, accelerator, optimizer) -> None:
        if self.kind is not None:
            self.kind.synchronize()  # the step's queued device work must finish before the clock stops
        elapsed = time.perf_counter() - self.clock
        if self.watch is not None:
            self.watch.stop()
        number = len(self.record["steps"]) + 1
        losses, self.step_losses = self.step_losses, []
        entry: dict[str, Any] = {"step": number, "time_s": elapsed, "losses": [_json_number(x) for x in losses],
                                 "loss": _step_loss(losses, getattr(accelerator, "gradient_accumulation_steps", 1))}
        params = self._named_parameters(optimizer, accelerator) if self.side != "bench" else {}
        grads = {name: p.grad.detach().float().cpu() for name, p in params.items()}
        entry["parameters"] = len(grads)
        if self.side == "reference":
            import torch

            torch.save(grads, self.directory / f"grads_{number}.pt")
        elif self.side == "accelerator" and self.reference is not None:
            entry["grad"] = self._compare_and_force(number, params, grads)
        self.record["steps"].append(entry)
        # Every op and call the Accelerator counted (stderr shows each op's warning only once).
        report = getattr(accelerator, "fallback_report", None)
        if report is not None:
            self.record["fallback_ops"] = dict(report())
        if number >= self.steps:
            self.record["stopped_by_check"] = True
            self.write()
            raise CheckStepsDone()
        self._restart_clock()

    def _named_parameters(self, optimizer, accelerator) -> dict:
        """name -> parameter, for the optimizer's parameters that have a gradient (unscaled first)."""
        _unscale(accelerator, optimizer)
        params = [p for group in getattr(optimizer, "param_groups", []) for p in group["params"]]
        if not params:
            params = [p for model in self.models for p in model.parameters()]
        return {self.names.get(id(p), f"optimizer.param{i}"): p for i, p in enumerate(params) if p.grad is not None}

    def _compare_and_force(self, number: int, params: dict, grads: dict) -> dict | None:
        """Compare with the reference's gradients, then step with the reference's gradients.

        Stepping with the reference's gradients keeps the weights of both runs (nearly) equal, so
        every step measures this step's kernels at the same weights, instead of the drift that an
        adaptive optimizer amplifies from tiny early differences. The optimizer itself still runs
        on the device, so a wrong optimizer kernel shows as disagreement at the next step.
        """
        import torch

        path = self.reference / f"grads_{number}.pt"
        if not path.exists():
            return None
        reference = torch.load(path, weights_only=True)
        result = compare_gradients(reference, grads)
        with torch.no_grad():
            for name, param in params.items():
                if name in reference and reference[name].shape == param.grad.shape:
                    param.grad.copy_(reference[name])
        result["max_rel"] = _json_number(result["max_rel"])
        result["global_rel"] = _json_number(result["global_rel"])
        result["worst"] = [[name, _json_number(err)] for name, err in result["worst"]]
        return result

    def write(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        self.record["float64_ops"] = dict(self.float64_ops)
        (self.directory / RECORD_FILE).write_text(json.dumps(self.record, indent=1))
        self.written = True


_recorder: _Recorder | None = None


def _seed_at_import() -> None:
    """In a checked run, seed python, numpy and torch as braeburn loads.

    The Accelerator draws its DataLoader shuffle seed from torch's generator when it prepares a
    DataLoader, before ``after_prepare`` runs; seeding here, when ``import braeburn.accelerator.core``
    loads this module, makes that draw (and any random data or weights the script makes) identical
    on both sides of `braeburn check`.
    """
    if not active():
        return
    import torch

    seed = int(os.environ.get(SEED_VAR) or DEFAULT_SEED)
    random.seed(seed)
    torch.manual_seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed)


_seed_at_import()


_looked = False  # the environment is read once per run: the hooks run every step


def _step_loss(losses: list[float], accumulation_steps: int) -> float | None:
    """The loss the script computed for a step (the mean of its micro-batches' losses). With accumulation each
    micro-batch's loss arrives divided by the steps (Accelerate's and Transformers' convention), so a full window's
    sum is that mean; a short last window (the epoch ended first: 7 micro-batches, accumulation 3) holds fewer, and
    its sum is scaled by the steps over the micro-batches it really had."""
    if not losses:
        return None
    total = sum(losses)
    if len(losses) < accumulation_steps:
        total *= accumulation_steps / len(losses)
    return _json_number(total)


def _current() -> _Recorder | None:
    global _recorder, _looked
    if _recorder is None and not _looked:
        _looked = True
        if active():
            _recorder = _Recorder(dict(os.environ))
    return _recorder


def _reset() -> None:
    """Forget the current run's recorder (for tests that run several checked loops in one process)."""
    global _recorder, _looked
    _looked = False
    if _recorder is not None:
        if _recorder.watch is not None:
            _recorder.watch.stop()
        atexit.unregister(_recorder.write)
    _recorder = None


# -- the hooks the Accelerator calls ----------------------------------------------------------


def after_prepare(accelerator, models) -> None:
    """Called once by Accelerator.prepare with the prepared models (unwrapped)."""
    recorder = _current()
    if recorder is None:
        return
    if not isinstance(models, (list, tuple)):
        models = [models]
    recorder.add_models(accelerator, list(models))


def after_backward(accelerator, loss) -> None:
    """Called by Accelerator.backward after the gradients of ``loss`` were computed."""
    recorder = _recorder if _looked else _current()  # every step: no call once looked
    if recorder is not None:
        recorder.add_loss(loss)


def before_optimizer_step(accelerator, optimizer) -> None:
    """Called by a prepared optimizer's step() before the parameters change."""
    recorder = _recorder if _looked else _current()  # every step: no call once looked
    if recorder is not None:
        recorder.add_step(accelerator, optimizer)


def read_record(directory: str | os.PathLike) -> dict | None:
    """The record a checked run left in ``directory``, or None when it never reached a hook."""
    path = Path(directory) / RECORD_FILE
    return json.loads(path.read_text()) if path.exists() else None
