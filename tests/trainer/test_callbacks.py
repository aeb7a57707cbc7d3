"""Typed hooks, and the built-in callbacks on their own."""

from __future__ import annotations

import contextlib
import io
import json
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import TensorDataset

import braeburn
from braeburn.trainer import Trainer, TrainingConfig
from braeburn.trainer import config as config_module
from braeburn.trainer.callbacks import HOOKS, Callback, CallbackList
from braeburn.trainer.early_stopping import EarlyStoppingCallback
from braeburn.trainer.metrics_log import MetricsLogCallback, read_metrics
from braeburn.trainer.plots import PlotCallback
from braeburn.trainer.progress import ProgressCallback
from braeburn.trainer.state import TrainerState


def fake_trainer(tmp_path, eval_strategy="epoch"):
    return SimpleNamespace(is_main_process=True, output_dir=tmp_path, config=SimpleNamespace(eval_strategy=eval_strategy))


def test_hooks_are_the_documented_ones():
    assert HOOKS == ("on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_step_begin",
                     "on_optimizer_step", "on_step_end", "on_log", "on_evaluate", "on_save")


def test_misspelled_hook_is_refused():
    class Typo(Callback):
        def on_epoch_ended(self, trainer, state):
            pass

    with pytest.raises(TypeError, match="Typo.on_epoch_ended is not a Trainer hook.*did you mean on_epoch_end"):
        CallbackList([Typo()])


def test_duck_typed_callbacks_and_class_instead_of_instance():
    class Plain:
        def __init__(self):
            self.seen = []

        def on_log(self, trainer, state, logs):
            self.seen.append(logs["loss"])

        def helper(self):
            return 1

    plain = Plain()
    callbacks = CallbackList([plain])
    callbacks.on_log(None, TrainerState(), {"loss": 0.5})
    callbacks.on_step_end(None, TrainerState())  # not defined: nothing happens
    assert plain.seen == [0.5]
    with pytest.raises(TypeError, match="Pass Plain()"):
        CallbackList([Plain])


def test_inherited_no_ops_are_not_dispatched():
    class OnlyLog(Callback):
        def on_log(self, trainer, state, logs):
            pass

    callbacks = CallbackList([OnlyLog(), Callback()])
    assert callbacks._handlers["on_step_end"] == [] and len(callbacks._handlers["on_log"]) == 1


def test_early_stopping_stops_after_patience(tmp_path):
    stopper, state = EarlyStoppingCallback("accuracy", patience=2), TrainerState()
    assert stopper.mode == "max" and stopper.metric == "eval_accuracy"
    stopper.on_train_begin(fake_trainer(tmp_path), state)
    for value in (0.5, 0.7, 0.69, 0.7):
        stopper.on_evaluate(None, state, {"eval_accuracy": value})
    assert state.should_stop and "eval_accuracy has not improved on 0.7 for 2 evaluation(s)" in state.stop_reason
    with pytest.raises(KeyError, match="it reported eval_loss"):
        stopper.on_evaluate(None, state, {"eval_loss": 1.0})
    with pytest.raises(ValueError, match="eval_strategy='no'"):
        stopper.on_train_begin(fake_trainer(tmp_path, "no"), state)


def test_metrics_log_writes_json_lines(tmp_path, capsys):
    logger, state, trainer = MetricsLogCallback(), TrainerState(global_step=3), fake_trainer(tmp_path)
    logger.on_train_begin(trainer, state)
    logger.on_log(trainer, state, {"loss": 0.25, "learning_rate": 1e-3})
    state.global_step = 6
    logger.on_log(trainer, state, {"loss": float("nan")})
    logger.on_train_end(trainer, state)
    assert read_metrics(tmp_path) == [{"step": 3, "loss": 0.25, "learning_rate": 1e-3}, {"step": 6, "loss": "nan"}]
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


def test_plain_progress_lines_when_not_a_terminal(tmp_path):
    stream = io.StringIO()
    progress, state = ProgressCallback(stream=stream), TrainerState(max_steps=10, steps_per_epoch=5)
    trainer = fake_trainer(tmp_path)
    progress.on_train_begin(trainer, state)
    state.global_step = 5
    progress.on_step_end(trainer, state)
    progress.on_log(trainer, state, {"loss": 0.5, "learning_rate": 2e-5, "samples_per_second": 100.0,
                                     "memory_bytes": 3 * 2**20})
    progress.on_train_end(trainer, state)
    line = stream.getvalue().strip()
    assert line.startswith("step 5/10 (50%) | epoch 1.00 | loss 0.5000 | lr 2.00e-05 | 100 samples/s | mem 3.0 MiB")
    assert "ETA 0:00:" in line


def test_rich_bar_on_a_terminal(tmp_path):
    stream = io.StringIO()
    progress, state = ProgressCallback(stream=stream, rich_bar=True), TrainerState(max_steps=4)
    progress.on_train_begin(fake_trainer(tmp_path), state)
    state.global_step = 4
    progress.on_log(fake_trainer(tmp_path), state, {"loss": 0.125})
    progress.on_train_end(fake_trainer(tmp_path), state)
    assert "4/4" in stream.getvalue() and "loss 0.1250" in stream.getvalue()


def test_plot_png_written(tmp_path):
    pytest.importorskip("matplotlib")  # optional dependency: the plot extra
    state = TrainerState(log_history=[{"step": 1, "loss": 1.0, "learning_rate": 1e-3},
                                      {"step": 2, "loss": 0.5, "learning_rate": 5e-4},
                                      {"step": 2, "eval_loss": 0.6, "eval_accuracy": 0.8}])
    plot = PlotCallback()
    plot.on_train_end(fake_trainer(tmp_path), state)  # draws in a thread
    plot.wait()  # the Trainer waits before train() returns
    assert plot.path == tmp_path / "training_curves.png"
    assert plot.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("report_to", ["all", "none"])
@pytest.mark.parametrize("trainer", ["core", "public"])
def test_report_to_decides_whether_tensorboard_is_written(tmp_path, report_to, trainer, cpu_only):
    """braeburn's own Trainer writes TensorBoard into output_dir/tensorboard; braeburn.Trainer (TrainingConfig and
    TrainingArguments alike) where Transformers writes it, output_dir/runs/<date>_<host>."""
    from braeburn.trainer.config import CoreTrainingConfig
    from braeburn.trainer.loop import CoreTrainer

    make, settings = (CoreTrainer, CoreTrainingConfig) if trainer == "core" else (Trainer, TrainingConfig)
    config = settings(output_dir=str(tmp_path), max_steps=2, logging_steps=1, save_strategy="no", report_to=report_to)
    data = TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))
    make(torch.nn.Linear(4, 2), config, train_dataset=data, loss_fn=torch.nn.functional.cross_entropy).train()
    # "all": TensorBoard exactly when the package is installed here; "none": never
    expected = report_to == "all" and config_module.tensorboard_installed()
    folder = "tensorboard" if trainer == "core" else "runs/*"
    assert bool([path for path in tmp_path.glob(folder) if path.is_dir()]) == expected
    assert bool(list(tmp_path.glob(f"{folder}/events.out.tfevents.*"))) == expected
    assert not (trainer == "public" and (tmp_path / "tensorboard").exists())
    assert [r["step"] for r in read_metrics(tmp_path) if "loss" in r] == [1, 2]  # metrics.jsonl either way


def test_report_to_tensorboard_without_the_package_is_refused(monkeypatch):
    monkeypatch.setattr(config_module, "tensorboard_installed", lambda: False)
    (error,) = [e for e in TrainingConfig(report_to="tensorboard").validate() if e.option == "report_to"]
    assert "pip install tensorboard" in str(error) and "--report_to all" in str(error)
    assert [e.option for e in TrainingConfig(report_to="wandb").validate()] == ["report_to"]


def test_a_banner_says_what_the_run_is_about_to_do(tmp_path, cpu_only, capsys):
    """With output to a file, nothing said what was about to happen before the first log line."""
    from torch.utils.data import TensorDataset

    from braeburn import Trainer, TrainingConfig

    data = TensorDataset(torch.randn(40, 3), torch.randn(40))
    config = TrainingConfig(output_dir=str(tmp_path), num_train_epochs=2, per_device_train_batch_size=8,
                            gradient_accumulation_steps=1, save_strategy="no", logging_steps=3)
    Trainer(torch.nn.Linear(3, 1), config, train_dataset=data,
            loss_fn=lambda out, y: torch.nn.functional.mse_loss(out.squeeze(-1), y)).train()
    out = capsys.readouterr().out
    assert ("braeburn: training on 40 examples: 2 epochs, 10 optimizer steps, 8 samples a step (8 per device x 1 "
            "process x 1 accumulated); a log line every 3 steps; output in " + str(tmp_path)) in out
    assert "training ended (2 epochs done)" in out


def test_without_a_terminal_a_line_comes_between_far_apart_logs(tmp_path, monkeypatch):
    import braeburn.trainer.progress as progress_module

    monkeypatch.setattr(progress_module, "HEARTBEAT_SECONDS", 0.0)  # every step is "a while" since the last line
    stream = io.StringIO()
    progress, state = ProgressCallback(stream=stream), TrainerState(max_steps=10, steps_per_epoch=5)
    progress.on_train_begin(fake_trainer(tmp_path), state)
    state.global_step = 1
    progress.on_step_end(fake_trainer(tmp_path), state)
    assert stream.getvalue().startswith("step 1/10 (10%) | epoch 0.20 | ETA ")


def test_on_a_terminal_every_log_stays_on_screen(tmp_path):
    """In a terminal only the last loss and evaluation stayed visible (in the bar)."""
    stream = io.StringIO()
    progress, state = ProgressCallback(stream=stream, rich_bar=True), TrainerState(max_steps=4)
    progress.on_train_begin(fake_trainer(tmp_path), state)
    for step, logs in ((2, {"loss": 0.5}), (2, {"eval_loss": 0.75}), (4, {"loss": 0.125})):
        state.global_step = step
        progress.on_log(fake_trainer(tmp_path), state, logs)
    progress.on_train_end(fake_trainer(tmp_path), state)
    shown = stream.getvalue()
    assert "step 2/4 | loss 0.5000" in shown and "step 2/4 | eval_loss 0.7500" in shown and "loss 0.1250" in shown


def test_the_banner_counts_the_examples_of_a_dataloader_not_its_batches():
    from torch.utils.data import DataLoader, IterableDataset, SubsetRandomSampler

    from braeburn.trainer.progress import examples_phrase

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(5))

    data = TensorDataset(torch.zeros(64, 2))
    assert examples_phrase(data) == "64 examples"
    assert examples_phrase(DataLoader(data, batch_size=8)) == "64 examples"
    assert examples_phrase(DataLoader(data, batch_size=8, sampler=SubsetRandomSampler(range(20)))) == "20 examples"
    assert examples_phrase(DataLoader(Stream(), batch_size=2)) == "an iterable dataset"


def test_tensorboard_logs_after_train_go_into_a_new_writer_in_the_runs_folder_each_flushed(tmp_path, monkeypatch):
    """trainer.log() / evaluate() after train(): a new writer in the run's TensorBoard folder (train()'s was closed),
    and every such log is on disk at once (nothing else flushes it), the second as the first."""
    import sys
    import types

    events = []

    class Writer:
        def __init__(self, log_dir=None, **_):
            self.log_dir = log_dir
            events.append(("open", log_dir))

        def add_scalar(self, tag, value, step=None):
            events.append(("scalar", tag, value, step))

        def add_text(self, *args, **kwargs):
            pass

        def flush(self):
            events.append(("flush",))

        def close(self):
            events.append(("close",))

    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = Writer
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    trainer = SimpleNamespace(output_dir=str(tmp_path), is_main_process=True)
    log, state = MetricsLogCallback(tensorboard=True), TrainerState()
    log.on_train_begin(trainer, state)
    state.global_step = 2
    log.on_log(trainer, state, {"loss": 1.0})
    log.on_train_end(trainer, state)
    log.on_log(trainer, state, {"custom": 1.5})
    log.on_log(trainer, state, {"eval_loss": 0.5})
    folder = str(tmp_path / "tensorboard")
    assert events == [("open", folder), ("scalar", "loss", 1.0, 2), ("close",), ("open", folder),
                      ("scalar", "custom", 1.5, 2), ("flush",), ("scalar", "eval_loss", 0.5, 2), ("flush",)]


def test_a_step_hook_a_callback_calls_idle_is_not_called_in_that_run():
    class Sometimes(Callback):
        def __init__(self):
            self.idle, self.steps, self.logs = True, 0, 0

        def idle_hooks(self):
            return ("on_step_end", "on_log") if self.idle else ()  # on_log is not a step hook: always called

        def on_step_end(self, trainer, state):
            self.steps += 1

        def on_log(self, trainer, state, logs):
            self.logs += 1

    sometimes = Sometimes()
    callbacks, state = CallbackList([sometimes]), TrainerState()
    callbacks.on_step_end(None, state)  # before any run: every hook is called
    callbacks.on_train_begin(None, state)
    callbacks.on_step_end(None, state)
    callbacks.on_log(None, state, {})
    assert (sometimes.steps, sometimes.logs) == (1, 1)
    sometimes.idle = False
    callbacks.on_train_begin(None, state)  # the next run asks again
    callbacks.on_step_end(None, state)
    assert sometimes.steps == 2
    sometimes.idle_hooks = lambda: ("on_step_end",)  # set on the instance: answers too
    callbacks.on_train_begin(None, state)
    callbacks.on_step_end(None, state)
    assert sometimes.steps == 2


def test_a_subclass_that_overrides_an_idle_step_hook_of_a_built_in_callback_is_still_called(tmp_path):
    """The options callback says on_step_end is idle without logging_first_step and torch_empty_cache_steps; a
    user's subclass that overrides on_step_end (and not idle_hooks) has its own work there: it is called."""
    from braeburn.compat.transformers.callbacks import HfOptionsCallback

    class CountingOptions(HfOptionsCallback):
        def __init__(self):
            super().__init__()
            self.steps = 0

        def on_step_end(self, trainer, state):
            super().on_step_end(trainer, state)
            self.steps += 1

    class KnowsItsOwn(CountingOptions):
        def idle_hooks(self):  # a subclass that answers for its own hook: believed
            return ("on_step_end",)

    counted = []
    for kind in (CountingOptions, KnowsItsOwn):
        config = braeburn.TrainingConfig(output_dir=str(tmp_path / kind.__name__), per_device_train_batch_size=4,
                                         num_train_epochs=1, save_strategy="no", use_cpu=True, report_to="none")
        dataset = torch.utils.data.TensorDataset(torch.randn(12, 4), torch.randint(0, 2, (12,)))
        with contextlib.redirect_stdout(io.StringIO()):
            trainer = braeburn.Trainer(torch.nn.Linear(4, 2), config, train_dataset=dataset,
                                       loss_fn=torch.nn.functional.cross_entropy)
            trainer.remove_callback(HfOptionsCallback)
            callback = kind()
            trainer.add_callback(callback)
            trainer.train()
        counted.append(callback.steps)
    assert counted == [3, 0]
