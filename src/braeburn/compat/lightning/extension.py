"""braeburn inside Lightning's own Trainer: ``lightning.Trainer(..., callbacks=[Braeburn()])``.

One callback, Lightning's own extension point for everything a fit goes through, brings what braeburn adds on a Mac
and a GPU, while Lightning stays the Trainer (so every Lightning idiom, callback, logger and ``.ckpt`` is Lightning's):

- at fit start, one line: the device Lightning trains on and why (``braeburn doctor``'s facts: on the CPU, each GPU
  that is here but cannot be reached, with its fix), the precision, and whether the variables the device needs
  before torch loads (the MPS CPU fallback) took effect; where they came too late, one line with the fix;
- the precision by measurement where the device leaves the choice (``extension_precision.py``): the Trainer's
  precision plugin is switched to the winner, with one line; an explicit non-default precision is kept;
- gradient checkpointing that replays the device's random state where torch.utils.checkpoint does not
  (``DeviceKind.checkpoint_replays_rng``: dropout in a checkpointed block draws the same mask in the recompute), and
  that device's generator state saved in Lightning's checkpoint (this callback's state) and put back on resume;
- at fit end, one summary block: where the time went (steps, between steps, validation), the memory the device and
  its driver hold, and the ops that fell back to the CPU.

On a device with nothing of this to do (the CPU; CUDA, whose precision and random state Lightning handles) it
changes none of Lightning's numbers: it prints its two blocks and keeps out of the way.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ...accelerator import checkpoint_replay
from ...devices.base import DeviceKind
from ...devices.fallback import FallbackRecorder
from ...devices.host import current_host
from ...devices.registry import fallback_kind, get_kind
from . import extension_precision as precision
from .extension_facts import StepClock, device_kind, device_words, early_env, summary_block
from .package import lightning_package

_pl = lightning_package()
_CHOICES = ("auto", "keep")


class Braeburn(_pl.Callback):
    """braeburn's facts and fixes for Lightning's Trainer: ``Trainer(..., callbacks=[Braeburn()])``.

    ``precision="auto"`` (the default) measures where the device leaves the choice and the Trainer has Lightning's
    default precision; ``"keep"`` keeps Lightning's precision without measuring."""

    def __init__(self, precision: str = "auto"):
        if precision not in _CHOICES:
            raise ValueError(f"Braeburn(precision={precision!r}): pass 'auto' (measure where the device leaves the "
                             f"choice) or 'keep' (Lightning's precision, as the Trainer was given it); the precision "
                             "itself is the Trainer's: lightning.Trainer(precision='bf16-mixed')")
        self.precision = precision
        self.kind: DeviceKind = fallback_kind()
        self.precision_words = ""
        self._clock = StepClock()
        self._fallback: FallbackRecorder | None = None
        self._patch: checkpoint_replay.CheckpointPatch | None = None
        self._patched = False
        self._saved_rng: dict[str, Any] | None = None
        self._measured: str | None = None  # the precision the trial chose ("no", "bf16", "fp16"), saved in the .ckpt
        self._resumed: tuple[str, Any] | None = None  # (that precision, its plugin's state) from the .ckpt resumed

    # -- fit start ------------------------------------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if not isinstance(trainer, _pl.Trainer):
            raise TypeError(f"Braeburn() was made for {_pl.__name__}.Trainer but handed a {type(trainer).__module__}"
                            ".Trainer: both of Lightning's packages are imported; import braeburn.lightning after "
                            "the one the script uses, or use one of them")
        self.kind = device_kind(trainer, _pl)
        self._patch = None if self.kind.checkpoint_replays_rng(current_host()) else \
            checkpoint_replay.CheckpointPatch(self.kind)
        if self._saved_rng is not None:  # loaded before the device was known (a resumed fit)
            self._put_back_rng(self._saved_rng)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        host = current_host()
        env_words, warning = early_env(self.kind, host, os.environ)
        if self._patch is not None:
            checkpoint_replay.prepare_model(pl_module, self.kind, compile_asked=False)
        self.precision_words = self._precision_at_start(trainer)
        if trainer.is_global_zero:
            if warning:
                print(warning, flush=True)
            print(f"braeburn: Lightning trains on {device_words(self.kind, host)}; precision "
                  f"{self.precision_words}{env_words}", flush=True)
        self._fallback = FallbackRecorder(count_every_call=self.kind.cpu_fallback_warns_once).start()
        self.kind.reset_peak_memory()  # the summary's peak is this fit's (a counter, no numbers change)
        self._clock = StepClock()
        self._clock.start()

    def _precision_at_start(self, trainer: Any) -> str:
        if self._resumed is not None and self._resumes_precision(trainer):
            return f"{precision.LIGHTNING_NAMES[self._resumed[0]]} ({precision.RESUMED})"
        found = precision.candidates(self.kind, current_host(), trainer.optimizers or [])
        if self.precision == "keep" or trainer.precision != precision.DEFAULT or not found:
            asked = "as the Trainer was given it" if trainer.precision != precision.DEFAULT else \
                "Lightning's default"
            return f"{trainer.precision} ({asked})"
        return f"{trainer.precision} until measured against {', '.join(precision.LIGHTNING_NAMES[c] for c in found)}"

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self._resumed is not None and self._resumes_precision(trainer):
            self._resume_precision(trainer)
            return
        if self.precision == "keep":
            return
        found = precision.candidates(self.kind, current_host(), trainer.optimizers)
        if trainer.precision != precision.DEFAULT or not found:
            return
        why_not = precision.why_not_measured(trainer, found)
        if why_not is not None:
            self.precision_words = f"32-true, not measured: {why_not}"
        else:
            chosen, line = precision.measure(trainer, pl_module, self.kind, found)
            self._measured = chosen
            if chosen != "no":
                trainer.strategy.precision_plugin = precision.lightning_plugin(
                    _pl, chosen, trainer.strategy.root_device.type)
            self.precision_words = f"{trainer.precision}, {line} ({precision.KEEP})"
        if trainer.is_global_zero:
            print(f"braeburn: precision {self.precision_words}", flush=True)

    def _resumes_precision(self, trainer: Any) -> bool:
        return self.precision != "keep" and trainer.precision == precision.DEFAULT

    def _resume_precision(self, trainer: Any) -> None:
        """The precision the resumed run measured, with its plugin's state (fp16's grad scale): Lightning restored
        neither, as the Trainer's plugin was its default when the checkpoint was read."""
        (chosen, plugin_state), self._resumed = self._resumed, None
        self._measured = chosen
        if chosen != "no":
            plugin = precision.lightning_plugin(_pl, chosen, trainer.strategy.root_device.type)
            if plugin_state is not None:
                plugin.load_state_dict(plugin_state)
            trainer.strategy.precision_plugin = plugin
        self.precision_words = f"{trainer.precision} ({precision.RESUMED})"
        if trainer.is_global_zero:
            print(f"braeburn: precision {self.precision_words}", flush=True)

    # -- the steps ------------------------------------------------------------------------------------------------
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._clock.begin("steps")
        self._enter_patch()

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self._exit_patch()  # the forward is done; a recompute in the backward replays by itself

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._exit_patch()
        self._clock.end("steps")

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._clock.begin("validation")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._clock.end("validation")

    def _enter_patch(self) -> None:
        if self._patch is not None and not self._patched:
            self._patch.__enter__()
            self._patched = True

    def _exit_patch(self) -> None:
        if self._patched:
            self._patch.__exit__(None, None, None)
            self._patched = False

    # -- fit end --------------------------------------------------------------------------------------------------
    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        fallbacks = self._stop()
        if trainer.is_global_zero:
            print(summary_block(self.kind, current_host(), self.precision_words or trainer.precision, self._clock,
                                fallbacks, trainer.global_step), flush=True)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._stop()

    def _stop(self) -> list[tuple[str, int]]:
        self._exit_patch()
        if self._fallback is None:
            return []
        self._fallback.stop()
        found, self._fallback = self._fallback.report(), None
        return found

    # -- the random state in Lightning's checkpoint ---------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The device's generator state where torch's own code leaves it out (nothing elsewhere: Lightning's
        checkpoint is then what it would be without braeburn)."""
        saved: dict[str, Any] = {} if self._measured is None else {"precision": self._measured}
        state = None if self._patch is None else self.kind.rng_state()
        if state is not None:
            saved["device_rng"] = {"kind": self.kind.name, "state": state}
        return saved

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        measured = checkpoint.get("callbacks", {}).get(self.state_key)
        if isinstance(measured, dict) and measured.get("precision") is not None:
            if measured["precision"] not in precision.LIGHTNING_NAMES:
                raise ValueError(_DAMAGED.format(what=f"{{'precision': {measured['precision']!r}}}"))
            plugin = _pl.plugins.precision.MixedPrecision.__qualname__  # the key Lightning saves its state under
            self._resumed = (measured["precision"], checkpoint.get(plugin))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = _checked_state(state_dict)
        if saved is not None:
            self._saved_rng = saved
            if self._patch is not None:
                self._put_back_rng(saved)

    def _put_back_rng(self, saved: dict[str, Any]) -> None:
        if saved["kind"] == self.kind.name:
            get_kind(saved["kind"]).set_rng_state(saved["state"])
        self._saved_rng = None


_DAMAGED = ("the checkpoint's callbacks['Braeburn'] entry is {what}, not what Braeburn() saves ({{'device_rng': "
            "{{'kind': str, 'state': the generator's tensor}}, 'precision': 'no', 'bf16' or 'fp16'}}): the .ckpt was "
            "damaged or written by other code. To resume without what it holds (the device's random state, the "
            "precision measured; the weights, optimizer and loops are Lightning's and unaffected), delete the entry: "
            "ckpt = torch.load(path, weights_only=False); del ckpt['callbacks']['Braeburn']; torch.save(ckpt, path)")


def _checked_state(state_dict: Any) -> dict[str, Any] | None:
    """The saved device generator state of a Lightning checkpoint's Braeburn entry (None: nothing saved); an entry of
    another shape is one error naming it and the fix (keys it does not know are left alone: a later version's)."""
    if not isinstance(state_dict, dict):
        raise ValueError(_DAMAGED.format(what=f"a {type(state_dict).__name__}"))
    saved = state_dict.get("device_rng")
    if saved is None:
        return None
    if not (isinstance(saved, dict) and isinstance(saved.get("kind"), str) and _generator_state(saved.get("state"))):
        shown = f"{{'device_rng': {type(saved).__name__}"
        shown += f" with keys {sorted(map(str, saved))}}}" if isinstance(saved, dict) else "}"
        raise ValueError(_DAMAGED.format(what=shown))
    return saved


def _generator_state(state: Any) -> bool:
    """A device generator's state as torch gives it: a tensor (or one per device)."""
    if isinstance(state, (list, tuple)):
        return bool(state) and all(isinstance(item, torch.Tensor) for item in state)
    return isinstance(state, torch.Tensor)


__all__ = ["Braeburn"]
