"""Lightning's idioms, as Lightning's docs write them, each run under the real Lightning and under braeburn in the same
test: most with Lightning's own Trainer and braeburn's extension (``callbacks=[Braeburn()]``), where everything but
the extension's two printed blocks must be Lightning's, bitwise on the CPU; the rest with
``braeburn.lightning.Trainer``, which gives Lightning's result or refuses before training with the way out."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from tests.compat.catalogue import Catalogue, assert_identical, assert_on_purpose, assert_refused
from tests.compat.lightning.scripts import (Classifier, both, classification_data, csv_metrics, observe, pl,
                                            quiet_trainer)

CATALOGUE = Catalogue("lightning")
WITH = "Lightning's own Trainer with `callbacks=[Braeburn()]`: "
SAME = WITH + "same losses, metrics, files and results, bitwise"


def script(trainer: dict[str, Any] | None = None, callbacks: Callable[[], list] = list,
           model: Callable[[], Any] = Classifier, train: Callable[[], Any] = lambda: classification_data(40, 8),
           val: Callable[[], Any] | None = lambda: classification_data(20, 6, seed=1),
           fit: dict[str, Any] | None = None, after: Callable[..., dict] | None = None):
    """A Lightning script: make the model and the Trainer, fit, then ``after(trainer, model, root)``."""
    def run(root: Path, extension: bool) -> dict[str, Any]:
        module = model()
        options = {"max_epochs": 2, "log_every_n_steps": 2, **(trainer or {})}
        if options.get("logger") == "csv":
            options["logger"] = pl.loggers.CSVLogger(str(root), name="csv")
        lightning = quiet_trainer(root, extension, callbacks=callbacks(), **options)
        lightning.fit(module, train(), val() if val else None, **(fit or {}))
        seen = {"losses": module.losses, "metrics": dict(lightning.callback_metrics),
                "steps": lightning.global_step, "epoch": lightning.current_epoch, "csv": csv_metrics(root)}
        return {**seen, **(after(lightning, module, root) if after else {})}
    return run


def identical(tmp_path: Path, run: Callable[[Path, bool], dict[str, Any]], **tolerance: Any) -> None:
    plain, ours, printed = both(tmp_path, run)
    assert plain.exit is None, f"the idiom fails under Lightning itself: {plain.exit}"
    assert_identical(plain, ours, **tolerance)
    assert plain.losses or plain.extra.get("steps") == 0, "nothing was trained"
    assert "braeburn: Lightning trains on" in printed  # the extension was on


def extension_idiom(name: str, run: Callable[[Path, bool], dict[str, Any]], how: str = SAME) -> None:
    @CATALOGUE.idiom(name, "identical", how)
    def idiom(tmp_path: Path) -> None:
        identical(tmp_path, run)


def checkpoints(root: Path) -> list[str]:
    return sorted(path.name for path in root.rglob("*.ckpt"))


# -- the Trainer's arguments ----------------------------------------------------------------------------------------
extension_idiom("Trainer(max_epochs=2).fit(model, train_dataloaders, val_dataloaders)", script())
extension_idiom("Trainer(max_steps=5)", script({"max_steps": 5, "max_epochs": -1}))
extension_idiom("Trainer(accumulate_grad_batches=3)", script({"accumulate_grad_batches": 3}))
extension_idiom("Trainer(gradient_clip_val=0.05)", script({"gradient_clip_val": 0.05}))
extension_idiom("Trainer(gradient_clip_val=0.01, gradient_clip_algorithm='value')",
                script({"gradient_clip_val": 0.01, "gradient_clip_algorithm": "value"}))
extension_idiom("Trainer(precision='bf16-mixed')", script({"precision": "bf16-mixed"}))
extension_idiom("Trainer(limit_train_batches=2)", script({"limit_train_batches": 2}))
extension_idiom("Trainer(limit_train_batches=0.5)", script({"limit_train_batches": 0.5}))
extension_idiom("Trainer(limit_val_batches=1)", script({"limit_val_batches": 1}))
extension_idiom("Trainer(val_check_interval=2)", script({"val_check_interval": 2}))
extension_idiom("Trainer(val_check_interval=0.5)", script({"val_check_interval": 0.5}))
extension_idiom("Trainer(check_val_every_n_epoch=2)", script({"check_val_every_n_epoch": 2, "max_epochs": 3}))
extension_idiom("Trainer(num_sanity_val_steps=0)", script({"num_sanity_val_steps": 0}))
extension_idiom("Trainer(fast_dev_run=True)", script({"fast_dev_run": True}))
extension_idiom("Trainer(overfit_batches=2)", script({"overfit_batches": 2}, val=None))
extension_idiom("Trainer(log_every_n_steps=1)", script({"log_every_n_steps": 1}))
extension_idiom("Trainer(deterministic=True)", script({"deterministic": True}))
extension_idiom("Trainer(enable_checkpointing=False)", script({"enable_checkpointing": False}))
extension_idiom("Trainer(logger=False)", script({"logger": False}))
extension_idiom("Trainer(max_epochs=-1, max_steps=4)", script({"max_epochs": -1, "max_steps": 4}))
extension_idiom("Trainer(min_epochs=3) with EarlyStopping",
                script({"min_epochs": 3, "max_epochs": 4},
                       lambda: [pl.callbacks.EarlyStopping(monitor="val_loss", patience=0)]))
extension_idiom("Trainer(reload_dataloaders_every_n_epochs=1)", script({"reload_dataloaders_every_n_epochs": 1}))

# -- Lightning's callbacks and loggers ------------------------------------------------------------------------------
extension_idiom("ModelCheckpoint(monitor='val_loss', save_top_k=2, filename='{epoch}-{val_loss:.4f}')",
                script(callbacks=lambda: [pl.callbacks.ModelCheckpoint(monitor="val_loss", save_top_k=2,
                                                                        filename="{epoch}-{val_loss:.4f}")],
                       after=lambda t, m, root: {"ckpts": checkpoints(root),
                                                 "best": Path(t.checkpoint_callback.best_model_path).name}))
extension_idiom("ModelCheckpoint(save_last=True)",
                script(callbacks=lambda: [pl.callbacks.ModelCheckpoint(save_last=True)],
                       after=lambda t, m, root: {"ckpts": checkpoints(root)}))
extension_idiom("ModelCheckpoint(every_n_train_steps=2, save_top_k=-1)",
                script(callbacks=lambda: [pl.callbacks.ModelCheckpoint(every_n_train_steps=2, save_top_k=-1)],
                       after=lambda t, m, root: {"ckpts": checkpoints(root)}))
extension_idiom("EarlyStopping(monitor='val_loss', patience=1)",
                script({"max_epochs": 6}, lambda: [pl.callbacks.EarlyStopping(monitor="val_loss", patience=1)],
                       model=lambda: Classifier(lr=0.8),
                       after=lambda t, m, root: {"stopped": t.early_stopping_callback.stopped_epoch}))
extension_idiom("LearningRateMonitor(logging_interval='step')",
                script(callbacks=lambda: [pl.callbacks.LearningRateMonitor(logging_interval="step")],
                       model=lambda: Classifier(scheduler="epoch")))
extension_idiom("CSVLogger(save_dir, name='csv')",
                script({"logger": "csv"}))
extension_idiom("GradientAccumulationScheduler(scheduling={0: 2, 1: 1})",
                script(callbacks=lambda: [pl.callbacks.GradientAccumulationScheduler(scheduling={0: 2, 1: 1})]))
extension_idiom("StochasticWeightAveraging(swa_lrs=0.05)",
                script({"max_epochs": 3}, lambda: [pl.callbacks.StochasticWeightAveraging(swa_lrs=0.05)]))
extension_idiom("ModelSummary(max_depth=1)", script(callbacks=lambda: [pl.callbacks.ModelSummary(max_depth=1)]))


class Recorder(pl.Callback):
    """A user's own callback: the order of the hooks Lightning calls."""

    def __init__(self):
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("on_") and name not in ("on_exception",):
            calls = object.__getattribute__(self, "calls")
            return lambda *args, **kwargs: calls.append(name)
        return object.__getattribute__(self, name)


def _recorded(t: Any, m: Any, root: Path) -> dict:
    return {"calls": next(c for c in t.callbacks if isinstance(c, Recorder)).calls}


extension_idiom("a Callback of the user's own (every hook, in Lightning's order)",
                script(callbacks=lambda: [Recorder()], after=_recorded))

# -- the Trainer's methods ------------------------------------------------------------------------------------------
extension_idiom("trainer.test(model, dataloaders=test_loader)",
                script(after=lambda t, m, root: {"tested": t.test(m, classification_data(12, 5, seed=2),
                                                                  verbose=False)}))
extension_idiom("trainer.predict(model, dataloaders=loader)",
                script(after=lambda t, m, root: {"predicted": t.predict(m, classification_data(12, 5, seed=2))}))
extension_idiom("trainer.validate(model, dataloaders=val_loader)",
                script(after=lambda t, m, root: {"validated": t.validate(m, classification_data(12, 5, seed=2),
                                                                         verbose=False)}))
extension_idiom("Model.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)",
                script(after=lambda t, m, root: {"weights": [p.detach() for p in Classifier.load_from_checkpoint(
                    t.checkpoint_callback.best_model_path).parameters()]}))
extension_idiom("trainer.save_checkpoint('model.ckpt')",
                script(after=lambda t, m, root: {"saved": t.save_checkpoint(str(root / "model.ckpt"))}))


def resumed(ckpt: str) -> Callable[[Path, bool], dict[str, Any]]:
    def run(root: Path, extension: bool) -> dict[str, Any]:
        first = script({"max_epochs": 1})(root, extension)
        path = str(next(root.rglob("*.ckpt"))) if ckpt == "path" else ckpt
        second = script({"max_epochs": 3}, fit={"ckpt_path": path})(root, extension)
        return {"losses": first["losses"] + second["losses"], "metrics": second["metrics"], "csv": second["csv"]}
    return run


extension_idiom("trainer.fit(model, ckpt_path=path) (resume)", resumed("path"))
extension_idiom("trainer.fit(model, ckpt_path='last')",
                script(callbacks=lambda: [pl.callbacks.ModelCheckpoint(save_last=True)], fit={"ckpt_path": "last"}))

# -- the LightningModule --------------------------------------------------------------------------------------------


class EpochEndLogger(Classifier):
    def on_train_epoch_end(self):
        self.log("epoch_marker", float(self.current_epoch) + 0.5)
        seen = self.trainer.callback_metrics.get("val_loss")  # the epoch's: its validation ran before this hook
        self.log("val_loss_at_epoch_end", -1.0 if seen is None else float(seen))


class Plateau(Classifier):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.5)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss"}}


class Manual(Classifier):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        optimizer.zero_grad()
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.manual_backward(loss)
        optimizer.step()
        self.losses.append(loss.item())
        self.log("train_loss", loss)


class Data(pl.LightningDataModule):
    def setup(self, stage: str):
        self.train_set = classification_data(40, 8).dataset
        self.val_set = classification_data(20, 6, seed=1).dataset

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.train_set, batch_size=8)

    def val_dataloader(self):
        return torch.utils.data.DataLoader(self.val_set, batch_size=6)


def _datamodule(root: Path, extension: bool) -> dict:
    module = Classifier()
    trainer = quiet_trainer(root, extension, max_epochs=2)
    trainer.fit(module, datamodule=Data())
    return {"losses": module.losses, "metrics": dict(trainer.callback_metrics)}


extension_idiom("self.log(name, value, on_step=True, on_epoch=True) (names `_step` and `_epoch`)", script())
extension_idiom("self.log in on_train_epoch_end", script(model=EpochEndLogger))
extension_idiom("self.log_dict({...}) in validation_step with a short last batch", script())
extension_idiom("nn.Dropout in the model (random numbers at every step)", script(model=lambda: Classifier(dropout=0.3)))
extension_idiom("configure_optimizers: {'lr_scheduler': {'scheduler': StepLR, 'interval': 'step'}}",
                script(model=lambda: Classifier(scheduler="step")))
extension_idiom("configure_optimizers: ReduceLROnPlateau with monitor='val_loss'", script({"max_epochs": 3},
                                                                                        model=Plateau))
extension_idiom("automatic_optimization = False (manual_backward, self.optimizers())", script(model=Manual))
extension_idiom("trainer.fit(model, datamodule=LightningDataModule())", _datamodule)
extension_idiom("a shuffled training DataLoader (shuffle=True)", script(train=lambda: classification_data(40, 8,
                                                                                                         shuffle=True)))

# -- braeburn.lightning.Trainer: identical, or refused before training ----------------------------------------------
BRAEBURN_TRAINER = "braeburn.lightning.Trainer: "


def braeburn_trainer_run(root: Path, module: Any, **kwargs: Any) -> Any:
    from braeburn.lightning import Trainer

    options = dict(accelerator="cpu", devices=1, max_epochs=2, enable_progress_bar=False,
                   enable_checkpointing=False, log_every_n_steps=2, default_root_dir=str(root))
    options.update(kwargs)
    trainer = Trainer(**options)
    trainer.fit(module, classification_data(40, 8), classification_data(20, 6, seed=1))
    return trainer


def lightning_run(root: Path, module: Any, **kwargs: Any) -> Any:
    options = dict(max_epochs=2, log_every_n_steps=2, enable_checkpointing=False, logger=False)
    options.update(kwargs)
    trainer = quiet_trainer(root, False, **options)
    trainer.fit(module, classification_data(40, 8), classification_data(20, 6, seed=1))
    return trainer


def compared(tmp_path: Path, make: Callable[[], Any], keys: Callable[[dict], dict]) -> tuple[dict, dict]:
    """callback_metrics after fit under Lightning and under braeburn.lightning.Trainer (picked by ``keys``)."""
    pl.seed_everything(0, verbose=False)
    theirs = keys({k: float(v) for k, v in lightning_run(tmp_path / "l", make()).callback_metrics.items()})
    pl.seed_everything(0, verbose=False)
    ours = keys({k: float(v) for k, v in braeburn_trainer_run(tmp_path / "b", make()).callback_metrics.items()})
    return theirs, ours


@CATALOGUE.idiom(BRAEBURN_TRAINER + "validation metrics with a short last batch (val_acc)", "identical",
                 "the epoch mean weighted by each batch's size, as Lightning infers it; within 1e-6 (the weighted "
                 "sum is added in another order)")
def _weighted_validation(tmp_path: Path) -> None:
    theirs, ours = compared(tmp_path, Classifier, lambda m: {k: m[k] for k in ("val_acc", "val_loss")})
    assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-7)


@CATALOGUE.idiom(BRAEBURN_TRAINER + "self.log(on_step=True, on_epoch=True) names in callback_metrics", "identical",
                 "`train_loss`, `train_loss_step` and `train_loss_epoch`, as Lightning; values within 1e-6")
def _forked_names(tmp_path: Path) -> None:
    theirs, ours = compared(tmp_path, Classifier, lambda m: {k: v for k, v in m.items() if k.startswith("train")})
    assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-7)


@CATALOGUE.idiom(BRAEBURN_TRAINER + "self.log in on_train_epoch_end (reading the epoch's val_loss), read after "
                 "the last epoch", "identical",
                 "the last epoch's value is in callback_metrics and in the log records; the epoch's validation runs "
                 "before on_train_epoch_end, which reads its val_loss, as Lightning's (within 1e-6)")
def _epoch_end_log(tmp_path: Path) -> None:
    names = ("epoch_marker", "val_loss_at_epoch_end", "val_loss")
    theirs, ours = compared(tmp_path, EpochEndLogger, lambda m: {name: m.get(name) for name in names})
    assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-7) and theirs["epoch_marker"] == 1.5
    assert theirs["val_loss_at_epoch_end"] == theirs["val_loss"]


class ReadsMetrics(Classifier):
    def __init__(self):
        super().__init__()
        self.seen: list[Any] = []

    def training_step(self, batch, batch_idx):
        value = self.trainer.callback_metrics.get("train_loss_step")
        self.seen.append(None if value is None else round(float(value), 6))
        return super().training_step(batch, batch_idx)


@CATALOGUE.idiom(BRAEBURN_TRAINER + "trainer.callback_metrics read at every step", "identical",
                 "the step's value is there from the first step on, not only at log steps")
def _metrics_every_step(tmp_path: Path) -> None:
    pl.seed_everything(0, verbose=False)
    theirs = ReadsMetrics()
    lightning_run(tmp_path / "l", theirs, log_every_n_steps=50)
    pl.seed_everything(0, verbose=False)
    ours = ReadsMetrics()
    braeburn_trainer_run(tmp_path / "b", ours, log_every_n_steps=50)
    assert ours.seen == theirs.seen and theirs.seen[1] is not None


@CATALOGUE.idiom(BRAEBURN_TRAINER + "trainer.callback_metrics['val_loss'].item(), trainer.logged_metrics", "identical",
                 "0-d tensors, as Lightning's (Optuna's pruning callback reads `.item()`); logged_metrics holds "
                 "`<name>_step`/`<name>_epoch` without the plain name, as Lightning; values within 1e-6")
def _metrics_are_tensors(tmp_path: Path) -> None:
    pl.seed_everything(0, verbose=False)
    theirs = lightning_run(tmp_path / "l", Classifier())
    pl.seed_everything(0, verbose=False)
    ours = braeburn_trainer_run(tmp_path / "b", Classifier())
    for name in ("callback_metrics", "logged_metrics"):
        want, got = getattr(theirs, name), getattr(ours, name)
        assert sorted(got) == sorted(want)
        assert all(isinstance(value, torch.Tensor) and value.ndim == 0 for value in got.values())
        assert {k: v.item() for k, v in got.items()} == pytest.approx({k: v.item() for k, v in want.items()},
                                                                       rel=1e-6, abs=1e-7)


@CATALOGUE.idiom(BRAEBURN_TRAINER + "Trainer(precision='16-mixed') on the CPU", "on purpose",
                 "autocasts to float16, as asked, where Lightning switches to bf16-mixed (with a warning); one line "
                 "at run time names precision='16-mixed' and precision='bf16-mixed' for Lightning's numbers")
def _fp16_on_the_cpu(tmp_path: Path) -> None:
    import contextlib
    import io

    from braeburn import errors

    assert lightning_run(tmp_path / "l", Classifier(), precision="16-mixed", max_steps=1).precision == "bf16-mixed"
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(printed):
        patch.setattr(errors, "_noted", set())  # (a note is printed once per process)
        braeburn_trainer_run(tmp_path / "b", Classifier(), precision="16-mixed", max_steps=1)
    line = assert_on_purpose(printed.getvalue().splitlines(), "precision='16-mixed'")
    assert "precision='bf16-mixed'" in line


def refused_idiom(name: str, call: Callable[[Any, Path], Any], words: list[str],
                  lightning: Callable[[Path], Any] | None = None, when: str = "by Trainer(...)") -> None:
    """braeburn.lightning.Trainer refuses ``call`` by name with the way out; Lightning runs it (``lightning``)."""
    @CATALOGUE.idiom(BRAEBURN_TRAINER + name, "refused",
                     f"refused {when}, by name; the way out: Lightning's own Trainer with `callbacks=[Braeburn()]`")
    def idiom(tmp_path: Path) -> None:
        from braeburn.lightning import Trainer

        if lightning is not None:
            peer, _ = observe(tmp_path / "peer", False, lambda root, ext: (lightning(root), {})[1])
            assert peer.exit is None, peer.exit
        with pytest.raises(Exception) as caught:
            call(Trainer, tmp_path)
        assert_refused(caught.value, words, ["callbacks=[braeburn.lightning.Braeburn()]"])


def _fitted(Trainer: Any, root: Path) -> Any:
    trainer = Trainer(accelerator="cpu", max_epochs=1, enable_progress_bar=False, default_root_dir=str(root))
    trainer.fit(Classifier(), classification_data(16, 8))
    return trainer


refused_idiom("Trainer(limit_train_batches=1) (an int: one batch)",
              lambda T, root: T(limit_train_batches=1), ["limit_train_batches=1", "one batch"],
              lambda root: lightning_run(root, Classifier(), limit_train_batches=1))
refused_idiom("Trainer(limit_val_batches=1) (an int: one batch)",
              lambda T, root: T(limit_val_batches=1), ["limit_val_batches=1"],
              lambda root: lightning_run(root, Classifier(), limit_val_batches=1))
refused_idiom("trainer.test(model, dataloaders)", lambda T, root: _fitted(T, root).test(Classifier()),
              ["trainer.test()"], when="when called (after fit, which it does not change)")
refused_idiom("trainer.predict(model, dataloaders)", lambda T, root: _fitted(T, root).predict(Classifier()),
              ["trainer.predict()"], when="when called (after fit, which it does not change)")
refused_idiom("trainer.fit(model, DataLoader(..., shuffle=True))",
              lambda T, root: T(accelerator="cpu", max_epochs=1, enable_progress_bar=False,
                                default_root_dir=str(root)).fit(Classifier(), classification_data(16, 8, shuffle=True)),
              ["shuffle=True", "shuffle=False"],
              lambda root: lightning_run(root, Classifier()), when="by fit(), before anything is written")
refused_idiom("Trainer(callbacks=[ModelCheckpoint(...)])",
              lambda T, root: T(callbacks=[pl.callbacks.ModelCheckpoint(monitor="val_loss")]), ["ModelCheckpoint"])
refused_idiom("Trainer(callbacks=[EarlyStopping(...)])",
              lambda T, root: T(callbacks=[pl.callbacks.EarlyStopping(monitor="val_loss")]), ["EarlyStopping"])


@pytest.mark.slow  # 32 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("idiom", CATALOGUE.params())
def test_lightning_idiom(idiom, tmp_path):
    idiom.run(tmp_path)


def test_the_catalogue_holds_40_idioms_or_more():
    assert len(CATALOGUE.idioms) >= 40
