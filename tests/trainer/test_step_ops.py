"""What braeburn's Trainer adds to a training step on the CPU, counted in tensor operations (not timed): a tiny
model's step is a few hundred microseconds, so each added operator call (a few microseconds on the CPU) shows in
the step rate that benchmarks/cpu_overhead.py measures."""

from __future__ import annotations

import collections

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader, TensorDataset

import braeburn
from braeburn.trainer.callbacks import Callback

FIRST, LAST = 5, 15  # the profiled steps: after the first batch's checks, before the end of the run
BATCH = 16


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(BATCH * 20, 8, generator=generator), torch.randint(0, 3, (BATCH * 20,),
                                                                                         generator=generator))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _counts(prof) -> collections.Counter:
    return collections.Counter({event.key: event.count for event in prof.key_averages() if event.key.startswith("aten::")})


def _bare_loop_ops() -> collections.Counter:
    """The same math as the Trainer's default run: AdamW (fused on the CPU), clipping at 1.0, a linear schedule."""
    net = _model()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.0, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / 20)
    loader = iter(DataLoader(_data(), batch_size=BATCH, shuffle=True))
    prof = profile(activities=[ProfilerActivity.CPU])
    for step in range(1, LAST + 1):
        if step == FIRST + 1:
            prof.start()
        x, y = next(loader)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    prof.stop()
    return _counts(prof)


class _Profiled(Callback):
    """Profiles the whole steps FIRST+1..LAST: from the end of step FIRST to the end of step LAST."""

    def __init__(self):
        self.prof = profile(activities=[ProfilerActivity.CPU])

    def on_step_end(self, trainer, state):
        if state.global_step == FIRST:
            self.prof.start()
        elif state.global_step == LAST:
            self.prof.stop()


def _trainer_ops(tmp_path) -> collections.Counter:
    spy = _Profiled()
    config = braeburn.TrainingConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH,
                                     learning_rate=1e-3, num_train_epochs=1, logging_steps=100, save_strategy="no",
                                     use_cpu=True, report_to="none")
    braeburn.Trainer(_model(), config, train_dataset=_data(), loss_fn=torch.nn.functional.cross_entropy,
                     callbacks=[spy]).train()
    return _counts(spy.prof)


def test_a_trainer_step_on_the_cpu_runs_the_bare_loops_operators_and_keeps_only_the_loss(tmp_path):
    bare, trainer = _bare_loop_ops(), _trainer_ops(tmp_path)
    steps = LAST - FIRST
    added = {name: count for name, count in (trainer - bare).items()}
    # The one addition: the step's loss, detached and kept on the device for the next log line (no sync).
    assert added == {"aten::detach": steps}, f"per {steps} steps the Trainer adds {added} to the bare loop's operators"
    missing = bare - trainer
    assert not missing, f"the bare loop runs operators the Trainer does not: {dict(missing)}"
