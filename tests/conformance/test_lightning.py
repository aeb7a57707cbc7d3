"""The same LightningModule trained by Lightning's Trainer and by braeburn.lightning.Trainer: the same losses, step
by step, and the same validation means (bitwise on the CPU: the arithmetic is the same; the data order is the
loader's, unshuffled, since braeburn's shuffle is seeded per epoch for exact resume). Skipped without Lightning."""

from __future__ import annotations

import importlib

import pytest
import torch

from ..lightning_modules import Regression, hand_loop, regression_data


def _lightning():
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    pytest.skip("Lightning is not installed (pip install lightning): the comparison needs the real one")


def _module_class(base: type) -> type:
    """Regression as a subclass of ``base`` (Lightning's LightningModule, or nn.Module for braeburn)."""

    class Module(Regression, base):
        def __init__(self, schedule: str):
            base.__init__(self)
            Regression.__init__(self, schedule)

    return Module


OPTIONS = dict(accelerator="cpu", devices=1, max_epochs=3, enable_progress_bar=False, enable_checkpointing=False,
               accumulate_grad_batches=2, gradient_clip_val=0.5)


@pytest.mark.parametrize("schedule", ["epoch", "step", "bare", "dict-return"])
def test_losses_match_lightning(tmp_path, monkeypatch, one_thread, schedule):
    pl = _lightning()
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    theirs = _module_class(pl.LightningModule)(schedule)
    pl.Trainer(**OPTIONS, default_root_dir=str(tmp_path / "pl"), logger=False, num_sanity_val_steps=0,
               enable_model_summary=False).fit(theirs, regression_data(samples=20), regression_data())

    from braeburn.lightning import Trainer

    ours = _module_class(pl.LightningModule)(schedule)  # the real LightningModule class, driven by braeburn
    trainer = Trainer(**OPTIONS, default_root_dir=str(tmp_path / "bb"))
    trainer.fit(ours, regression_data(samples=20), regression_data())
    assert len(ours.losses) == 15 and ours.losses == theirs.losses
    assert trainer.callback_metrics["val_mse"] == pytest.approx(float(theirs.trainer.callback_metrics["val_mse"]),
                                                                rel=1e-6)


@pytest.mark.parametrize("precision", ["bf16-mixed"])
def test_mixed_precision_matches_lightning(tmp_path, monkeypatch, one_thread, precision):
    """Both autocast the step to bfloat16 on the CPU (the same ops in the same order): the losses are equal too.
    Not "16-mixed": on the CPU Lightning switches it to bf16-mixed, braeburn autocasts to float16 as asked and
    says so (test_lightning_path.py)."""
    pl = _lightning()
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    options = {**OPTIONS, "precision": precision}
    theirs = _module_class(pl.LightningModule)("epoch")
    pl.Trainer(**options, default_root_dir=str(tmp_path / "pl"), logger=False, num_sanity_val_steps=0,
               enable_model_summary=False).fit(theirs, regression_data(samples=20))

    from braeburn.lightning import Trainer

    ours = _module_class(pl.LightningModule)("epoch")
    Trainer(**options, default_root_dir=str(tmp_path / "bb")).fit(ours, regression_data(samples=20))
    assert ours.losses == theirs.losses
    float32 = hand_loop(regression_data(samples=20), epochs=3, interval="epoch", accumulate=2, clip=0.5)
    assert ours.losses != float32  # autocast was on, in both


def test_callbacks_and_validate_match_lightning(tmp_path, monkeypatch, one_thread):
    """A lightning.Callback subclass sees the same epochs and steps; validate() returns the same means."""
    pl = _lightning()
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")

    def recorder():
        class Recorder(pl.Callback):
            def __init__(self):
                self.seen = []

            def on_train_epoch_end(self, trainer, module):
                self.seen.append((trainer.current_epoch, trainer.global_step))

        return Recorder()

    theirs, their_callback = _module_class(pl.LightningModule)("epoch"), recorder()
    their_trainer = pl.Trainer(**OPTIONS, callbacks=[their_callback], default_root_dir=str(tmp_path / "pl"),
                               logger=False, num_sanity_val_steps=0, enable_model_summary=False)
    their_trainer.fit(theirs, regression_data(samples=20))
    their_val = their_trainer.validate(theirs, regression_data(samples=10), verbose=False)

    from braeburn.lightning import Trainer

    ours, our_callback = _module_class(pl.LightningModule)("epoch"), recorder()
    our_trainer = Trainer(**OPTIONS, callbacks=[our_callback], default_root_dir=str(tmp_path / "bb"))
    our_trainer.fit(ours, regression_data(samples=20))
    our_val = our_trainer.validate(ours, regression_data(samples=10), verbose=False)
    assert our_callback.seen == their_callback.seen
    assert our_val == [{name: pytest.approx(value, rel=1e-6) for name, value in their_val[0].items()}]
