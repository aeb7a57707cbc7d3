"""braeburn.lightning.Trainer: a LightningModule trained by braeburn's Trainer, on the CPU, without Lightning."""

from __future__ import annotations

import pytest
import torch

from braeburn.compat.lightning.module import split_optimizers, step_loss
from braeburn.lightning import LightningArgumentError, Trainer

from .lightning_modules import Regression, hand_loop, regression_data


@pytest.fixture(autouse=True)
def _cpu(cpu_only, one_thread):
    pass


def _trainer(tmp_path, **kwargs) -> Trainer:
    options = dict(accelerator="cpu", devices=1, max_epochs=3, log_every_n_steps=1, enable_progress_bar=False,
                   enable_checkpointing=False, default_root_dir=str(tmp_path))
    return Trainer(**{**options, **kwargs})


def _logged(trainer: Trainer, key: str) -> list[float]:
    return [record[key] for record in trainer.braeburn_trainer.state.log_history if key in record]


@pytest.mark.parametrize("schedule,interval", [("epoch", "epoch"), ("step", "step"), ("bare", "epoch"),
                                               ("dict-return", "epoch")])
def test_losses_equal_a_hand_written_loop(tmp_path, schedule, interval):
    model, loader = Regression(schedule), regression_data()
    _trainer(tmp_path).fit(model, loader)
    assert model.losses == hand_loop(regression_data(), epochs=3, interval=interval)  # bitwise on the CPU


def test_accumulation_and_clipping_as_lightning_does_them(tmp_path):
    model = Regression("epoch")
    _trainer(tmp_path, accumulate_grad_batches=4, gradient_clip_val=0.5).fit(model, regression_data(samples=20))
    assert model.losses == hand_loop(regression_data(samples=20), epochs=3, interval="epoch", accumulate=4, clip=0.5)


@pytest.mark.parametrize("schedule,rates", [("epoch", [0.05] * 6 + [0.025] * 6),
                                            ("step", [0.05 * 0.5 ** i for i in range(12)])])
def test_scheduler_interval_is_respected(tmp_path, schedule, rates):
    trainer = _trainer(tmp_path, max_epochs=2)
    trainer.fit(Regression(schedule), regression_data())
    assert _logged(trainer, "learning_rate") == pytest.approx(rates)


def test_self_log_reaches_the_logged_metrics(tmp_path):
    model, trainer = Regression(), _trainer(tmp_path, max_epochs=2)
    trainer.fit(model, regression_data(), regression_data(samples=10, batch_size=4))
    assert _logged(trainer, "train_mse") == model.losses  # on_step: each step's value, in each step's record
    epoch_means = _logged(trainer, "train_mse_epoch")
    assert epoch_means == pytest.approx([sum(model.losses[:6]) / 6, sum(model.losses[6:]) / 6])
    val = _logged(trainer, "eval_val_mse")
    assert len(val) == 2 and trainer.callback_metrics["val_mse"] == pytest.approx(val[-1])
    validated = trainer.validate(model, regression_data(samples=10, batch_size=4))
    assert validated == [{"val_mse": pytest.approx(val[-1])}]  # weighted by batch size (4, 4, 2), as Lightning


def test_hooks_and_attributes(tmp_path):
    model = Regression()
    _trainer(tmp_path, max_epochs=2).fit(model, regression_data(), regression_data())
    # Lightning's order: the sanity check's validation first, and each epoch's validation before its
    # on_train_epoch_end (test_catalogue_validation.py compares it with Lightning's own run)
    assert model.calls == ["on_validation_epoch_end", "on_train_start", "on_train_epoch_start:0",
                           "on_validation_epoch_end", "on_train_epoch_end:6", "on_train_epoch_start:1",
                           "on_validation_epoch_end", "on_train_epoch_end:12", "on_train_end"]
    assert type(model) is Regression and not hasattr(model, "log")  # the run's attributes are gone after it


def test_callbacks_get_trainer_and_module(tmp_path):
    seen = []

    class Recorder:
        def on_train_epoch_end(self, trainer, module):
            seen.append((trainer.current_epoch, trainer.global_step, type(module).__name__))

    _trainer(tmp_path, max_epochs=2, callbacks=[Recorder()]).fit(Regression(), regression_data())
    assert seen == [(0, 6, "Regression"), (1, 12, "Regression")]


def test_unsupported_arguments_are_refused_together():
    with pytest.raises(LightningArgumentError) as caught:
        Trainer(accelerator="cpu", precision="64-true", strategy="deepspeed", val_check_interval=1.5,
                overfit_batches=2, devices=[0, 1])
    message = str(caught.value)
    for name in ("precision='64-true'", "strategy='deepspeed'", "val_check_interval=1.5", "overfit_batches=2",
                 "devices=[0, 1]"):
        assert name in message
    assert len(caught.value.errors) == 5


def test_hooks_braeburn_would_not_call_are_refused(tmp_path):
    class Custom(Regression):
        def on_before_optimizer_step(self, optimizer):
            pass

        def optimizer_step(self, *args, **kwargs):
            pass

    with pytest.raises(LightningArgumentError, match="Custom.on_before_optimizer_step.*\n.*Custom.optimizer_step"):
        _trainer(tmp_path).fit(Custom(), regression_data())


def test_precision_spellings(tmp_path):
    trainer = _trainer(tmp_path, precision="bf16-mixed", max_epochs=1)
    assert trainer.options.config.mixed_precision == "bf16"
    assert _trainer(tmp_path).options.config.mixed_precision == "no"  # Lightning's default "32-true"


def test_max_steps_and_max_epochs_whichever_first(tmp_path):
    model = Regression()
    _trainer(tmp_path, max_epochs=1, max_steps=100).fit(model, regression_data())
    assert len(model.losses) == 6


def test_configure_optimizers_shapes():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    assert split_optimizers(optimizer) == (optimizer, None)
    assert split_optimizers([optimizer]) == (optimizer, None)
    assert split_optimizers(([optimizer], [scheduler])) == (optimizer, scheduler)
    assert split_optimizers({"optimizer": optimizer, "lr_scheduler": scheduler}) == (optimizer, scheduler)
    assert split_optimizers([{"optimizer": optimizer}]) == (optimizer, None)
    with pytest.raises(ValueError, match="2 optimizers"):
        split_optimizers([optimizer, optimizer])
    with pytest.raises(ValueError, match="'loss'"):
        step_loss({"logits": torch.zeros(1)}, "training_step")


def test_several_processes_are_refused_naming_lightnings_ddp_sampler_and_the_way_out():
    from braeburn.compat.lightning.options import lightning_options

    for given, launched in (({"devices": 2}, None), ({"devices": 2}, 2), ({"devices": 2}, 4), ({}, 2)):
        _, errors = lightning_options(given, launched=launched)
        assert len(errors) == 1 and "DistributedSampler(shuffle=True" in errors[0], (given, launched)
        assert "callbacks=[braeburn.lightning.Braeburn()]" in errors[0]
    options, errors = lightning_options({"devices": 1}, launched=1)
    assert errors == [] and options.config.devices == 1


def test_plateau_scheduler_reads_the_logged_monitor(tmp_path):
    class Plateau(Regression):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
            self.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": self.plateau, "monitor": "val_mse"}}

    model = Plateau()
    trainer = _trainer(tmp_path, max_epochs=2)
    trainer.fit(model, regression_data(), regression_data())
    assert model.plateau.last_epoch == 2  # stepped once per validation
    assert model.plateau.best == pytest.approx(min(_logged(trainer, "eval_val_mse")))


def test_fit_resumes_from_a_checkpoint_exactly(tmp_path):
    whole = Regression()
    _trainer(tmp_path / "whole").fit(whole, regression_data())
    first, first_trainer = Regression(), _trainer(tmp_path / "run", max_epochs=2, enable_checkpointing=True)
    first_trainer.fit(first, regression_data())
    assert first_trainer.log_dir == str(tmp_path / "run" / "lightning_logs" / "version_0")
    resumed = Regression()
    _trainer(tmp_path / "run", enable_checkpointing=True).fit(
        resumed, regression_data(), ckpt_path=str(tmp_path / "run" / "lightning_logs" / "version_0" / "checkpoint-12"))
    assert first.losses + resumed.losses == whole.losses


def test_configure_optimizers_reads_estimated_stepping_batches(tmp_path):
    class OneCycle(Regression):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
            total = self.trainer.estimated_stepping_batches
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=total)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    trainer = _trainer(tmp_path, max_epochs=2, accumulate_grad_batches=2)
    trainer.fit(OneCycle(), regression_data())
    assert trainer.estimated_stepping_batches == 6 and trainer.global_step == 6  # OneCycleLR would raise at step 7


def test_fit_ckpt_path_last_is_the_latest_checkpoint(tmp_path):
    _trainer(tmp_path, max_epochs=1, enable_checkpointing=True).fit(Regression(), regression_data())
    resumed = Regression()
    trainer = _trainer(tmp_path, max_epochs=2, enable_checkpointing=True)
    trainer.fit(resumed, regression_data(), ckpt_path="last")
    assert len(resumed.losses) == 6 and trainer.global_step == 12


def test_datamodule_and_module_loaders(tmp_path):
    class Data:
        def __init__(self):
            self.stages = []

        def prepare_data(self):
            self.stages.append("prepare_data")

        def setup(self, stage):
            self.stages.append(stage)

        def train_dataloader(self):
            return regression_data()

        def val_dataloader(self):
            return regression_data(samples=8)

    data, model = Data(), Regression()
    trainer = _trainer(tmp_path, max_epochs=1)
    trainer.fit(model, datamodule=data)
    assert data.stages == ["prepare_data", "fit"] and len(model.losses) == 6 and "val_mse" in trainer.callback_metrics

    class OwnLoaders(Regression):
        def train_dataloader(self):
            return regression_data()

    own = OwnLoaders()
    _trainer(tmp_path, max_epochs=1).fit(own)
    assert own.losses == model.losses


def test_callback_hooks_run_before_the_module_hooks(tmp_path):
    model = Regression()

    class First:
        def on_train_start(self, trainer, module):
            module.calls.append("callback")

    _trainer(tmp_path, max_epochs=1, callbacks=[First()]).fit(model, regression_data())
    assert model.calls[:2] == ["callback", "on_train_start"]  # Lightning's fit_loop: callbacks, then the module


def test_16_mixed_on_the_cpu_says_how_it_differs_from_lightning(tmp_path, capsys):
    model = Regression()
    _trainer(tmp_path, max_epochs=1, precision="16-mixed").fit(model, regression_data())
    assert "Lightning switches to bf16-mixed" in capsys.readouterr().err
    assert model.losses[1:] != hand_loop(regression_data(), epochs=1, interval="epoch")[1:]  # float16 autocast


def test_self_device_is_the_run_device(tmp_path):
    seen = []

    class Devices(Regression):
        def on_train_start(self):
            seen.append(self.device)

    _trainer(tmp_path, max_epochs=1).fit(Devices(), regression_data())
    assert seen == [torch.device("cpu")]


def test_manual_optimization_is_refused(tmp_path):
    model = Regression()
    model.automatic_optimization = False
    with pytest.raises(LightningArgumentError, match="manual optimization is not supported"):
        _trainer(tmp_path).fit(model, regression_data())


def test_log_dict_and_lightning_keywords(tmp_path):
    class Dicts(Regression):
        def validation_step(self, batch, batch_idx):
            x, y = batch
            error = self.layer(x) - y
            self.log_dict({"val_mae": error.abs().mean(), "val_max": error.abs().max()}, prog_bar=True,
                          sync_dist=True, batch_size=len(x))

    trainer = _trainer(tmp_path, max_epochs=1)
    trainer.fit(Dicts(), regression_data(), regression_data(samples=8))
    assert set(trainer.callback_metrics) >= {"val_mae", "val_max", "train_mse"}
    assert _logged(trainer, "eval_val_mae") == [pytest.approx(trainer.callback_metrics["val_mae"])]


def test_the_run_banner_counts_examples_not_batches(tmp_path, capsys):
    _trainer(tmp_path, max_epochs=1).fit(Regression("epoch"), regression_data(samples=64, batch_size=8))
    out = capsys.readouterr().out
    assert "training on 64 examples: 1 epoch, 8 optimizer steps, 8 samples a step" in out, out


def test_the_summary_says_why_compile_is_off_when_nobody_asked(tmp_path, capsys):
    _trainer(tmp_path, max_epochs=1).fit(Regression("epoch"), regression_data())
    out = capsys.readouterr().out
    assert "compile    off (compile=false, braeburn.lightning's default: Lightning's Trainer does not compile" in out
    assert "as asked" not in next(line for line in out.splitlines() if "compile    " in line)
