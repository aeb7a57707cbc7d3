"""The Trainer end to end on CPU: learning a real task, batches, losses, NaN handling, output_dir rules."""

from __future__ import annotations

import math
import os

import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

from braeburn.trainer import Callback, EarlyStoppingCallback, NonFiniteLossError
from braeburn.trainer.config import CoreTrainingConfig as TrainingConfig
from braeburn.trainer.loop import CoreTrainer as Trainer
from braeburn.trainer.metrics_log import read_metrics
from braeburn.trainer.optim import parameter_groups, schedule_factor


pytestmark = pytest.mark.usefixtures("one_thread", "cpu_only")  # about the CPU on any machine


def digits():
    sklearn = pytest.importorskip("sklearn.datasets")
    x, y = sklearn.load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y)
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(x), generator=generator)
    train, test = order[:1400], order[1400:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test])


def accuracy(prediction):
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}  # numpy, as in Transformers


def mlp(seed=0, width=64, dropout=0.0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Dropout(dropout),
                               torch.nn.Linear(width, 10))


def test_learns_digits_to_95_percent(tmp_path, capsys):
    train, test = digits()
    config = TrainingConfig(output_dir=str(tmp_path / "run"), num_train_epochs=10, learning_rate=1e-2,
                            per_device_train_batch_size=32, weight_decay=0.01, warmup_ratio=0.05,
                            lr_scheduler_type="cosine", logging_steps=20, eval_strategy="epoch", save_total_limit=2,
                            metric_for_best_model="accuracy", greater_is_better=True)
    trainer = Trainer(mlp(width=128), config, train_dataset=train, eval_dataset=test, compute_metrics=accuracy,
                      loss_fn=torch.nn.functional.cross_entropy,
                      callbacks=[EarlyStoppingCallback("accuracy", patience=5)])
    result = trainer.train()
    assert result.global_step == 440 and result.metrics["eval_accuracy"] >= 0.95, result
    out = capsys.readouterr().out
    for fragment in ("training ended", "device     cpu", "precision  no", "440/440 optimizer steps", "samples/s",
                     "peak mem", "last eval  eval_loss", "eval_accuracy 0.9", "CPU fallback ops  none"):
        assert fragment in out, fragment
    files = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert "metrics.jsonl" in files and len([f for f in files if f.startswith("checkpoint-")]) <= 3
    records = read_metrics(tmp_path / "run")
    assert [r["step"] for r in records if "loss" in r][:3] == [20, 40, 60]
    assert sum("eval_accuracy" in r for r in records) == 10
    best = trainer.state.best_checkpoint
    assert best and (tmp_path / "run" / best.split("/")[-1]).exists()  # rotation never deletes the best
    prediction = trainer.predict(test)
    assert prediction.predictions.shape == (len(test), 10) and prediction.metrics["test_loss"] > 0


class DictModel(torch.nn.Module):
    """Transformers style: keyword inputs, and a dict output with the loss when labels are given."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, features, labels=None):
        logits = self.linear(features)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


class DictData(Dataset):
    def __init__(self, n=32):
        torch.manual_seed(1)
        self.x, self.y = torch.randn(n, 4), torch.randint(0, 2, (n,))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"features": self.x[i], "labels": self.y[i]}


def test_dict_batches_and_the_models_own_loss(tmp_path):
    model = DictModel()
    before = model.linear.weight.detach().clone()
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=6, logging_steps=2, save_strategy="no",
                            eval_strategy="steps", eval_steps=3, gradient_accumulation_steps=2)
    trainer = Trainer(model, config, train_dataset=DictData(), eval_dataset=DictData(8))
    result = trainer.train()
    assert result.global_step == 6 and "eval_loss" in result.metrics and math.isfinite(result.training_loss)
    assert not torch.equal(before, model.linear.weight)
    assert [r["step"] for r in trainer.state.log_history if "eval_loss" in r] == [3, 6]


def test_the_core_trainers_prepared_loader_reports_the_dataloaders_batch_size(tmp_path):
    from braeburn.trainer import CoreTrainer, CoreTrainingConfig
    config = CoreTrainingConfig(output_dir=str(tmp_path), max_steps=1, save_strategy="no", per_device_train_batch_size=4)
    trainer = CoreTrainer(DictModel(), config, train_dataset=DictData())
    trainer.train()
    loader = trainer._train_loader
    assert loader.batch_size == 4 and len(loader.dataset) // loader.batch_size == 8


def test_output_without_loss_names_both_fixes(tmp_path):
    x, y = torch.randn(8, 64), torch.randint(0, 10, (8,))
    trainer = Trainer(mlp(), TrainingConfig(output_dir=str(tmp_path), max_steps=1),
                      train_dataset=TensorDataset(x, y))
    with pytest.raises(TypeError, match=r"returned Tensor, which carries no loss.*loss_fn=.*output\.loss"):
        trainer.train()


def test_a_rerun_into_a_used_output_dir_sets_the_earlier_run_aside_and_trains(tmp_path, capsys):
    """Transformers 5 trains into a non-empty output_dir (it has no --overwrite_output_dir); braeburn does too, and
    first moves the earlier run's files into previous-run-N/, so that nothing of it is written over. Only
    braeburn's own files move: the user's file stays where it is."""
    def run():
        trainer = Trainer(mlp(), TrainingConfig(output_dir=str(tmp_path), max_steps=2, save_steps=1),
                          train_dataset=TensorDataset(torch.randn(4, 64), torch.zeros(4, dtype=torch.long)),
                          loss_fn=torch.nn.functional.cross_entropy)
        trainer.train()
        return trainer

    (tmp_path / "notes.txt").write_text("the user's")
    run()
    first = {p.name: p.read_bytes() for p in (tmp_path / "checkpoint-2").rglob("*") if p.is_file()}
    assert "held an earlier run" not in capsys.readouterr().out  # the user's file is not an earlier run
    run()
    assert "held an earlier run" in capsys.readouterr().out
    assert (tmp_path / "notes.txt").read_text() == "the user's"  # not braeburn's: never moved
    kept = tmp_path / "previous-run-1" / "checkpoint-2"
    assert {p.name: p.read_bytes() for p in kept.rglob("*") if p.is_file()} == first
    assert (tmp_path / "checkpoint-2").is_dir()  # the new run's own
    run()  # a set-aside run is never moved again: it stays beside the next one
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("previous-run-")) == [
        "previous-run-1", "previous-run-2"]
    assert not (tmp_path / "previous-run-2" / "previous-run-1").exists()


def test_overwrite_output_dir_keeps_the_files_in_place(tmp_path):
    (tmp_path / "old.txt").write_text("earlier run")
    trainer = Trainer(mlp(), TrainingConfig(output_dir=str(tmp_path), max_steps=1, overwrite_output_dir=True,
                                            save_strategy="no"),
                      train_dataset=TensorDataset(torch.randn(4, 64), torch.zeros(4, dtype=torch.long)),
                      loss_fn=torch.nn.functional.cross_entropy)
    trainer.train()
    assert (tmp_path / "old.txt").read_text() == "earlier run"
    assert not any(p.name.startswith("previous-run-") for p in tmp_path.iterdir())


class PoisonAt(Callback):
    """Turns the model's weights to NaN after a given step, so the next loss is NaN."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, trainer, state):
        if state.global_step == self.step:
            with torch.no_grad():
                trainer.model[0].weight.fill_(float("nan"))


def test_nan_loss_stops_naming_the_step_and_last_checkpoint(tmp_path):
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=30, logging_steps=5, save_strategy="steps",
                            save_steps=4, per_device_train_batch_size=4)
    trainer = Trainer(mlp(), config, train_dataset=TensorDataset(x, y), loss_fn=torch.nn.functional.cross_entropy,
                      callbacks=[PoisonAt(6)])
    with pytest.raises(NonFiniteLossError) as error:
        trainer.train()
    message = str(error.value)
    assert "became nan at step 7" in message and f"{tmp_path / 'checkpoint-4'}" in message
    assert "--nan_policy skip" in message
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-4"]  # nothing saved after it


def test_a_save_between_logs_leaves_the_logged_loss_the_mean_of_every_step_since_the_last_log(tmp_path):
    """A checkpoint checks the loss window for NaN but does not empty it: the loss logged after a save is the
    mean over all the steps since the last log, as in Transformers, bitwise the same as without the save."""
    x, y = torch.randn(96, 64, generator=torch.Generator().manual_seed(1)), torch.arange(96) % 10
    logged = {}
    for save in ("no", "epoch", "steps"):
        config = TrainingConfig(output_dir=str(tmp_path / save), num_train_epochs=3, logging_steps=4,
                                save_strategy=save, save_steps=3, per_device_train_batch_size=16)
        trainer = Trainer(mlp(), config, train_dataset=TensorDataset(x, y), loss_fn=torch.nn.functional.cross_entropy)
        result = trainer.train()
        logged[save] = ([(r["step"], r["loss"]) for r in trainer.state.log_history if "loss" in r],
                        result.training_loss)
    assert [step for step, _ in logged["no"][0]] == [4, 8, 12, 16]  # saves at 6 and 12 (epoch), 3, 6, 9... (steps)
    assert logged["epoch"] == logged["no"] and logged["steps"] == logged["no"]


def test_nan_found_at_a_save_names_its_step_when_an_earlier_save_checked_part_of_the_window(tmp_path):
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=12, logging_steps=10, save_strategy="steps",
                            save_steps=3, per_device_train_batch_size=4)
    trainer = Trainer(mlp(), config, train_dataset=TensorDataset(x, y), loss_fn=torch.nn.functional.cross_entropy,
                      callbacks=[PoisonAt(4)])
    with pytest.raises(NonFiniteLossError, match="became nan at step 5"):
        trainer.train()
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-3"]


def test_samples_per_second_counts_a_short_last_batch_as_its_real_size(tmp_path, capsys):
    """33 examples at batch 32: each epoch trains 32 + 1 samples, not 2 full batches (Transformers' speed is
    dataset length x epochs over the time)."""
    x, y = torch.randn(33, 64), torch.arange(33) % 10
    config = TrainingConfig(output_dir=str(tmp_path), num_train_epochs=3, per_device_train_batch_size=32,
                            save_strategy="no", logging_steps=2)
    trainer = Trainer(mlp(), config, train_dataset=TensorDataset(x, y), loss_fn=torch.nn.functional.cross_entropy)
    metrics = trainer.train().metrics
    assert trainer.state.samples_seen == 99
    speed = float(capsys.readouterr().out.split("  speed      ")[1].split(" samples/s")[0])
    runtime = metrics["train_runtime"]  # rounded to 0.1 ms, as Transformers rounds it: for a run of a few ms that
    slack = 0.01 + 1e-4 / runtime  # alone moves 99 / runtime by 1% or more (it failed once at 1.06%, on a fast CPU)
    for rate in (metrics["train_samples_per_second"], speed):  # 99 samples, not 3 x 2 full batches (192)
        assert 99 / runtime * (1 - slack) <= rate <= 99 / runtime * (1 + slack), (rate, runtime)


class NanBatches(Dataset):
    def __init__(self):
        torch.manual_seed(2)
        self.x, self.y = torch.randn(16, 64), torch.randint(0, 10, (16,))
        self.x[5] = float("inf")

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def test_nan_policy_skip_skips_the_bad_step(tmp_path):
    config = TrainingConfig(output_dir=str(tmp_path), num_train_epochs=1, per_device_train_batch_size=1,
                            logging_steps=4, nan_policy="skip", save_strategy="no")
    model = mlp()
    trainer = Trainer(model, config, train_dataset=NanBatches(), loss_fn=torch.nn.functional.cross_entropy)
    result = trainer.train()
    assert result.global_step == 16 and math.isfinite(result.training_loss)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert [r for r in trainer.state.log_history if "loss" in r][-1]["skipped_steps"] == 1


def test_default_optimizer_groups_and_schedules():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    decay, no_decay = parameter_groups(model, 0.1)
    assert [tuple(p.shape) for p in decay["params"]] == [(4, 4)] and decay["weight_decay"] == 0.1
    assert len(no_decay["params"]) == 3 and no_decay["weight_decay"] == 0.0
    assert schedule_factor(0, kind="linear", warmup=4, total=10) == 0.0
    assert schedule_factor(4, kind="linear", warmup=4, total=10) == 1.0
    assert schedule_factor(7, kind="linear", warmup=4, total=10) == pytest.approx(0.5)
    assert schedule_factor(7, kind="cosine", warmup=4, total=10) == pytest.approx(0.5)
    assert schedule_factor(9, kind="constant", warmup=4, total=10) == 1.0


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, trainer, state):
        if state.global_step == self.step:
            state.request_stop("test stop", save=True)


def resume_with_accumulation(tmp_path, **settings) -> tuple[dict, dict, dict]:
    """Weights at the start, at the end of an uninterrupted run, and at the end of the same run stopped
    mid-epoch (inside an accumulation window's epoch) at step 3 and resumed in this process. On the
    device the environment chooses (tests here pin the CPU); ``settings`` go to TrainingConfig."""
    generator = torch.Generator().manual_seed(5)
    x, y = torch.randn(50, 64, generator=generator), torch.randint(0, 10, (50,), generator=generator)

    def run(out, callbacks=(), resume=None):
        model = mlp(seed=3, dropout=0.3)
        config = TrainingConfig(output_dir=str(tmp_path / out), num_train_epochs=2, per_device_train_batch_size=4,
                                gradient_accumulation_steps=3, logging_steps=2, save_strategy="no",
                                weight_decay=0.05, warmup_steps=2, **settings)
        Trainer(model, config, train_dataset=TensorDataset(x, y), loss_fn=torch.nn.functional.cross_entropy,
                callbacks=list(callbacks)).train(resume_from_checkpoint=resume)
        return {name: value.detach().cpu() for name, value in model.state_dict().items()}

    reference = run("a")
    run("b", callbacks=[StopAt(3)])  # 13 batches per epoch: step 3 is mid-epoch
    assert sorted(p.name for p in (tmp_path / "b").glob("checkpoint-*")) == ["checkpoint-3"]
    return mlp(seed=3, dropout=0.3).state_dict(), reference, run("b", resume="latest")


def bitwise_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_resume_in_process_matches_uninterrupted_with_accumulation(tmp_path):
    """On the CPU a resumed run ends bitwise equal to an uninterrupted one, with no setting needed."""
    _, reference, resumed = resume_with_accumulation(tmp_path)
    assert bitwise_equal(reference, resumed)


def test_full_determinism_switches_torch_to_deterministic_algorithms_and_stays_bitwise(tmp_path, restore_determinism):
    _, reference, resumed = resume_with_accumulation(tmp_path, full_determinism=True)
    assert bitwise_equal(reference, resumed)
    assert torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"  # set where the user had not


class MemoryHungry(torch.nn.Module):
    """Raises the CPU allocator's out-of-memory error for batches larger than 4."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 10)

    def forward(self, x):
        if x.shape[0] > 4:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
        return self.linear(x)


@pytest.mark.slow  # 4 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_auto_find_batch_size_halves_until_a_step_fits(tmp_path, capsys):
    config = TrainingConfig(output_dir=str(tmp_path), per_device_train_batch_size=16, auto_find_batch_size=True,
                            max_steps=3, save_strategy="no")
    trainer = Trainer(MemoryHungry(), config, train_dataset=TensorDataset(torch.randn(40, 64),
                                                                          torch.randint(0, 10, (40,))),
                      loss_fn=torch.nn.functional.cross_entropy)
    assert trainer.train().global_step == 3
    assert config.per_device_train_batch_size == 4
    assert "training with per_device_train_batch_size=4" in capsys.readouterr().out


@pytest.mark.parametrize("loss_fn", [None, "given"])
def test_training_forwards_keep_the_models_dtype_only_where_the_model_computes_the_loss(tmp_path, monkeypatch,
                                                                                       loss_fn):
    """Under bf16 autocast, a training forward whose loss the model computes returns its logits as computed (no
    float32 copy nobody reads); with a loss_fn the logits are float32 as before, and so are evaluation's."""
    import braeburn.trainer.loop as loop

    seen = []
    original = loop.check_labels
    monkeypatch.setattr(loop, "check_labels", lambda outputs, labels: (seen.append(outputs["logits"].dtype),
                                                                       original(outputs, labels))[1])
    config = TrainingConfig(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=8,
                            mixed_precision="bf16", save_strategy="no", use_cpu=True, disable_tqdm=True)
    given = (lambda outputs, labels: torch.nn.functional.cross_entropy(outputs["logits"], labels)) if loss_fn else None
    trainer = Trainer(DictModel(), config, train_dataset=DictData(), loss_fn=given)
    trainer.train()
    assert seen == [torch.float32 if loss_fn else torch.bfloat16]
    assert trainer.state.log_history[-1]["train_loss"] > 0
    prediction = trainer.predict(DictData(8))
    assert prediction.predictions.dtype.name == "float32"


def test_transformers_output_is_held_back_and_put_back():
    """Transformers' load report and progress bars are noise in a braeburn run unless --log_level info."""
    logging = pytest.importorskip("transformers").utils.logging
    from braeburn.compat.transformers.files import transformers_quiet

    before = logging.get_verbosity(), logging.is_progress_bar_enabled()
    with transformers_quiet():
        assert logging.get_verbosity() == logging.ERROR and not logging.is_progress_bar_enabled()
    assert (logging.get_verbosity(), logging.is_progress_bar_enabled()) == before
    with transformers_quiet(quiet=False):
        assert (logging.get_verbosity(), logging.is_progress_bar_enabled()) == before
