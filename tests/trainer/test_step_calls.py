"""What braeburn's Trainer adds to a training step on the CPU, counted in Python calls (not timed): a tiny model's
step is a few hundred microseconds, and each call the Trainer makes around the bare loop's (its function, its
frame, the code it touches) shows in the step rate that benchmarks/cpu_overhead.py measures. Counted as
cProfile counts them, over N and 2N steps, so that setup and the end of the run cancel."""

from __future__ import annotations

import contextlib
import cProfile
import io
import pstats

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import braeburn
from braeburn.compat.transformers import overrides

pytestmark = pytest.mark.usefixtures("one_thread", "cpu_only")

BATCH, STEPS = 16, 20
# Python calls per step beyond the bare loop's (558 here), set just above what the Trainer makes now: 62 for
# braeburn.Trainer, 54 for the core Trainer; 146 and 118 before the step was trimmed (docs/benchmarks.md, Part 3b).
# 62 and 54 after the trim; then the clip and zero_grad wrappers (StepClipper: a layer unfrozen mid-run is clipped,
# braeburn.Trainer zeroes the gradients its optimizer does not hold, as Transformers) and the loader's one batch path
# (_on_device) added 4: 68 and 58 here. Then 44 and 38: step hooks a callback calls idle not called, no null context
# entered, the loss-output hooks only without a loss_fn, no FLO count or window length asked where they are 0 and 1,
# a two-tensor batch's size and signature without a loop, the schedule's and the clip's wrappers thinner, and a
# TensorDataset's default batches checked once an epoch, not at each batch. Two calls of slack: a fresh CI venv
# counted 58.05 for the core (calls made every few steps, spread over them, differ between installs).
MAX_EXTRA_CALLS = {"public": 46, "core": 40}


def _data(steps: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    n = BATCH * steps
    return TensorDataset(torch.randn(n, 8, generator=generator), torch.randint(0, 3, (n,), generator=generator))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _bare(steps: int, profiler: cProfile.Profile) -> None:
    """The Trainer's default math (AdamW fused on the CPU, clipping at 1.0, a linear schedule), written by hand,
    with the parameters listed once (as the Trainer lists them), not walked at every step."""
    net = _model()
    parameters = list(net.parameters())
    optimizer = torch.optim.AdamW(parameters, lr=1e-3, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    loader = DataLoader(_data(steps), batch_size=BATCH, shuffle=True)
    profiler.enable()
    for x, y in loader:
        torch.nn.functional.cross_entropy(net(x), y).backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    profiler.disable()


def _trainer(kind: str, folder) -> callable:
    """The Trainer's loop (its epochs: not the setup, nor the summary and plot at the end, whose calls depend on
    the run's length through the plot's axes), logging less often than it steps."""
    if kind == "public":
        trainer_class, config_class = braeburn.Trainer, braeburn.TrainingConfig
    else:
        from braeburn.trainer.config import CoreTrainingConfig as config_class
        from braeburn.trainer.loop import CoreTrainer as trainer_class

    def run(steps: int, profiler: cProfile.Profile) -> None:
        config = config_class(output_dir=str(folder / f"out-{steps}"), per_device_train_batch_size=BATCH,
                              learning_rate=1e-3, num_train_epochs=1, logging_steps=10 * steps, save_strategy="no",
                              use_cpu=True, report_to="none")
        with contextlib.redirect_stdout(io.StringIO()):
            trainer = trainer_class(_model(), config, train_dataset=_data(steps),
                                    loss_fn=torch.nn.functional.cross_entropy)
            train_epochs = trainer._train_epochs

            def profiled(loader):
                profiler.enable()
                try:
                    train_epochs(loader)
                finally:
                    profiler.disable()

            trainer._train_epochs = profiled
            trainer.train()

    return run


def _calls(run, steps: int) -> int:
    profiler = cProfile.Profile()
    run(steps, profiler)
    return sum(stat[1] for stat in pstats.Stats(profiler).stats.values())  # every call, recursive ones too


def _calls_per_step(run) -> float:
    run(STEPS, cProfile.Profile())  # first-call work (imports, caches) before counting
    return (_calls(run, 2 * STEPS) - _calls(run, STEPS)) / STEPS


@pytest.mark.parametrize("kind", ["public", "core"])
def test_a_trainer_step_on_the_cpu_makes_few_python_calls_beyond_the_bare_loops(tmp_path, kind):
    bare, trainer = _calls_per_step(_bare), _calls_per_step(_trainer(kind, tmp_path))
    extra = trainer - bare
    assert extra <= MAX_EXTRA_CALLS[kind], (
        f"{kind}: a step makes {trainer:.1f} Python calls, the bare loop's {bare:.1f}: {extra:.1f} more, where at most "
        f"{MAX_EXTRA_CALLS[kind]} are expected (profile it: benchmarks/results/cpu-overhead/"
        "2026-11-26-s5-marginal-profile.py)")


def test_a_full_accumulation_window_runs_without_the_loss_division_context(tmp_path, monkeypatch):
    """The context that divides a micro-batch's loss by a short window's length is entered only for that window:
    7 batches with gradient_accumulation_steps=3 make windows of 3, 3 and 1."""
    entered = []
    divide = overrides.loss_divided_by

    def counting(accelerator, steps):
        entered.append(steps)
        return divide(accelerator, steps)

    monkeypatch.setattr(overrides, "loss_divided_by", counting)
    config = braeburn.TrainingConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH,
                                     gradient_accumulation_steps=3, num_train_epochs=1, save_strategy="no",
                                     use_cpu=True, report_to="none")
    with contextlib.redirect_stdout(io.StringIO()):
        trainer = braeburn.Trainer(_model(), config, train_dataset=_data(7),
                                   loss_fn=torch.nn.functional.cross_entropy)
        trainer.train()
    assert entered == [1] and trainer.state.global_step == 3, entered


def test_floating_point_ops_of_a_tuple_batch_is_zero_without_unwrapping_the_model(tmp_path, monkeypatch):
    """Transformers counts a batch's FLOs from its main input (a dict key); a tuple batch has none, so the count is
    0 before the model is looked at (unwrapping it reads a missing attribute of a Module at every step)."""
    config = braeburn.TrainingConfig(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none")
    trainer = braeburn.Trainer(_model(), config, train_dataset=_data(2), loss_fn=torch.nn.functional.cross_entropy)
    monkeypatch.setattr(trainer.accelerator, "unwrap_model", lambda model: pytest.fail("unwrapped for a tuple batch"))
    assert trainer.floating_point_ops([torch.zeros(BATCH, 8), torch.zeros(BATCH, dtype=torch.long)]) == 0


def test_the_built_in_callbacks_with_nothing_to_do_at_a_step_are_not_called_there(tmp_path):
    """The step breakdown (not sampling: one process, "auto") and the options callback (no logging_first_step, no
    torch_empty_cache_steps) say on_step_end is idle; the progress heartbeat and the signal check stay."""
    config = braeburn.TrainingConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH,
                                     num_train_epochs=1, save_strategy="no", use_cpu=True, report_to="none")
    with contextlib.redirect_stdout(io.StringIO()):
        trainer = braeburn.Trainer(_model(), config, train_dataset=_data(3), loss_fn=torch.nn.functional.cross_entropy)
        trainer.train()
    called = {type(handler.__self__).__name__ for handler in trainer.callbacks._handlers["on_step_end"]}
    assert {"StepBreakdownCallback", "OptionsCallback"}.isdisjoint(called) and "ProgressCallback" in called, called


def test_logging_first_step_keeps_the_options_callback_at_the_steps(tmp_path):
    config = braeburn.TrainingConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH,
                                     num_train_epochs=1, save_strategy="no", use_cpu=True, report_to="none",
                                     logging_first_step=True, logging_steps=50)
    with contextlib.redirect_stdout(io.StringIO()):
        trainer = braeburn.Trainer(_model(), config, train_dataset=_data(3), loss_fn=torch.nn.functional.cross_entropy)
        trainer.train()
    assert [entry["step"] for entry in trainer.state.log_history if "loss" in entry] == [1]


def test_a_context_that_accumulate_returns_is_entered_around_the_micro_batch(tmp_path, monkeypatch):
    """One process gets a null context, which the loop skips; any other (DDP's no_sync off the boundary) is entered
    around the forward and backward."""
    events = []

    class Recording(contextlib.AbstractContextManager):
        def __enter__(self):
            events.append("enter")

        def __exit__(self, *exc):
            events.append("exit")

    config = braeburn.TrainingConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH,
                                     num_train_epochs=1, save_strategy="no", use_cpu=True, report_to="none")
    with contextlib.redirect_stdout(io.StringIO()):
        trainer = braeburn.Trainer(_model(), config, train_dataset=_data(2), loss_fn=torch.nn.functional.cross_entropy)
        accumulate, micro_batch = trainer.accelerator.accumulate, trainer._micro_batch
        monkeypatch.setattr(trainer.accelerator, "accumulate", lambda *models: (accumulate(*models), Recording())[1])
        monkeypatch.setattr(trainer, "_micro_batch", lambda *args: (events.append("micro"), micro_batch(*args)))
        trainer.train()
    assert events == ["enter", "micro", "exit"] * 2


def test_the_step_paths_for_a_two_tensor_batch_give_what_the_general_ones_give():
    from braeburn.data.collate import batch_signature
    from braeburn.data.loader import first_dim
    from braeburn.trainer.batches import batch_inputs
    from braeburn.trainer.schedules import _linear, _warming, schedule_curve

    x, y = torch.zeros(BATCH, 8), torch.zeros(BATCH, dtype=torch.long)
    for batch in ((x, y), [x, y]):
        assert batch_signature(batch) == (x.shape, y.shape) == batch_signature((x, y, "a string"))[:2]
        assert first_dim(batch) == BATCH == first_dim(({"x": x}, y))
        args, kwargs, labels = batch_inputs(batch, pass_labels=False)
        assert args[0] is x and kwargs == {} and labels is y and type(args) is tuple
    from braeburn.trainer.collators import make_collate

    config = braeburn.TrainingConfig(output_dir="unused", use_cpu=True, report_to="none")
    collate = make_collate(_model(), config, None, None)  # the Sequential's forward names its input: a wrapper
    assert collate.hands_tuples_to_default_collate  # so the loader yields its batches with no check per batch
    assert not getattr(make_collate(_model(), config, lambda s: s, None), "hands_tuples_to_default_collate", False)
    linear = schedule_curve("linear", 7, 1000, {})
    for step in range(0, 1003):
        expected = _warming(step, 7) if step < 7 else _linear(step, 7, 1000, {})
        assert linear(step) == expected  # the same float, bit for bit


def test_a_subclass_that_counts_its_own_flos_is_asked_for_a_tuple_batch(tmp_path):
    class Counting(braeburn.Trainer):
        def floating_point_ops(self, inputs):
            return 7

    config = braeburn.TrainingConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH,
                                     num_train_epochs=1, save_strategy="no", use_cpu=True, report_to="none")
    with contextlib.redirect_stdout(io.StringIO()):
        trainer = Counting(_model(), config, train_dataset=_data(3), loss_fn=torch.nn.functional.cross_entropy)
        trainer.train()
        assert trainer.state.total_flos == 21
        # a function set on the instance is asked too, as Transformers' loop calls self.floating_point_ops
        trainer = braeburn.Trainer(_model(), config, train_dataset=_data(3), loss_fn=torch.nn.functional.cross_entropy)
        trainer.floating_point_ops = lambda inputs: 5
        trainer.train()
    assert trainer.state.total_flos == 15


def test_no_class_of_the_trainer_defines_getattr_so_its_attribute_reads_specialize():
    """A class with __getattr__ keeps Python from specializing its instances' attribute reads (each self.x takes
    the generic lookup: 23 K CPU instructions a step of the tiny MLP's, docs/benchmarks.md Part 3b); the names
    Transformers has and braeburn lacks are refused by descriptors on the class instead."""
    from braeburn.compat.transformers.not_here import NotInBraeburn

    for trainer_class in (braeburn.Trainer, braeburn.trainer.loop.CoreTrainer):
        assert [k.__name__ for k in trainer_class.__mro__ if "__getattr__" in vars(k)] == []
    assert not hasattr(braeburn.Trainer, "hyperparameter_search")
    with pytest.raises(NotInBraeburn, match="Trainer.hyperparameter_search"):
        braeburn.Trainer.hyperparameter_search
