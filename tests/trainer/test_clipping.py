"""The Trainer's gradient clipping (braeburn.trainer.clipping): folded into the fused AdamW step where it changes no
number braeburn compares bit for bit (a compiled model, or max_grad_norm=0 measuring only), clip_grad_norm_ elsewhere.
Compiled runs use torch.compile's "eager" backend: a real compiled forward, without a C compiler."""

from __future__ import annotations

import pytest
import torch

import braeburn
from braeburn import Accelerator
from braeburn.trainer import clipping
from braeburn.trainer.config import CoreTrainingConfig
from braeburn.trainer.loop import CoreTrainer

pytestmark = pytest.mark.usefixtures("no_launcher_env", "one_thread")

STEPS = 12  # compile=true compiles after step 6 (half the run): steps 7..12 train compiled


class _Data(torch.utils.data.Dataset):
    def __init__(self, n=STEPS * 8):
        generator = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 16, generator=generator), torch.randn(n, 1, generator=generator) * 4

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index]


class _Watch:
    """Each step: the norm the Trainer logs, and the total norm of the gradients a callback sees after the step."""

    def __init__(self):
        self.logged, self.seen = [], []

    def on_optimizer_step(self, trainer, state):
        self.logged.append(trainer._grad_norm.clone() if trainer._grad_norm is not None else None)
        grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
        self.seen.append(torch.nn.utils.get_total_norm(grads))


def _train(tmp_path, name, *, fold=True, trainer_class=CoreTrainer, config_class=CoreTrainingConfig,
           optimizer=None, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    config = config_class(output_dir=str(tmp_path / name), use_cpu=True, torch_compile_backend="eager",
                          max_steps=STEPS, per_device_train_batch_size=8, save_strategy="no", logging_steps=4,
                          disable_tqdm=True, learning_rate=1e-2, **options)
    watch = _Watch()
    subclass = type("Trainer", (trainer_class,), {"folds_clip_into_step": fold})
    trainer = subclass(model, config, train_dataset=_Data(), loss_fn=torch.nn.functional.mse_loss,
                       optimizer=optimizer(model) if optimizer else None, callbacks=[watch])
    trainer.train()
    return trainer, model, watch


@pytest.fixture
def folds(monkeypatch):
    """How many steps the clip went into the optimizer's step."""
    calls = []
    real = clipping.clip_scale
    monkeypatch.setattr(clipping, "clip_scale", lambda norm, limit: calls.append(limit) or real(norm, limit))
    return calls


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.usefixtures("fresh_dynamo")
def test_a_compiled_run_folds_the_clip_from_the_compile_on_and_stays_within_rounding_of_clip_grad_norm_(
        tmp_path, folds):
    trainer, model, watch = _train(tmp_path, "fold", compile="true", max_grad_norm=0.05)
    assert trainer._clipper.compiled and trainer._clipper.refusal is None
    assert folds == [0.05] * (STEPS // 2)  # the eager steps before the compile clipped with clip_grad_norm_
    _, plain_model, plain = _train(tmp_path, "plain", fold=False, compile="true", max_grad_norm=0.05)
    assert len(folds) == STEPS // 2  # the unfolded run never folded
    # the same gradients up to the first folded step, so the same norm, bit for bit; then rounding apart
    assert all(map(torch.equal, watch.logged[:STEPS // 2 + 1], plain.logged[:STEPS // 2 + 1]))
    torch.testing.assert_close(torch.stack(watch.logged), torch.stack(plain.logged), rtol=1e-5, atol=0)
    for p, q in zip(model.parameters(), plain_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    # every step clipped, and a callback after the step sees the clipped gradients, as with clip_grad_norm_
    assert all(norm > 0.05 for norm in watch.logged)
    torch.testing.assert_close(torch.stack(watch.seen), torch.full((STEPS,), 0.05), rtol=1e-5, atol=0)


@pytest.mark.usefixtures("fresh_dynamo")
def test_a_compiled_run_that_never_clips_is_bitwise_the_unfolded_run(tmp_path, folds):
    trainer, model, watch = _train(tmp_path, "fold", compile="true", max_grad_norm=1e6)
    assert len(folds) == STEPS // 2
    _, plain_model, plain = _train(tmp_path, "plain", fold=False, compile="true", max_grad_norm=1e6)
    assert all(map(torch.equal, watch.logged + watch.seen, plain.logged + plain.seen))
    assert all(map(torch.equal, model.parameters(), plain_model.parameters()))


def test_an_eager_run_that_clips_keeps_clip_grad_norm_(tmp_path, folds):
    """Eager training is what the catalogue compares bit for bit with the Transformers Trainer: no fold."""
    trainer, _, watch = _train(tmp_path, "eager", compile="false", max_grad_norm=0.05)
    assert folds == [] and not trainer._clipper.compiled
    torch.testing.assert_close(torch.stack(watch.seen), torch.full((STEPS,), 0.05), rtol=1e-5, atol=0)


def test_max_grad_norm_0_measuring_the_norm_folds_even_eager_and_changes_no_bit(tmp_path, folds):
    """braeburn.Trainer logs grad_norm with max_grad_norm=0 (as Transformers): the fold divides by exactly 1.0."""
    options = dict(trainer_class=braeburn.Trainer, config_class=braeburn.TrainingConfig, compile="false",
                   max_grad_norm=0.0)
    _, model, watch = _train(tmp_path, "fold", **options)
    assert folds == [float("inf")] * STEPS
    _, plain_model, plain = _train(tmp_path, "plain", fold=False, **options)
    assert len(folds) == STEPS and all(norm is not None for norm in watch.logged)
    assert all(map(torch.equal, watch.logged + watch.seen, plain.logged + plain.seen))
    assert all(map(torch.equal, model.parameters(), plain_model.parameters()))


def test_max_grad_norm_0_in_the_core_measures_nothing(tmp_path, folds):
    _, _, watch = _train(tmp_path, "core", compile="false", max_grad_norm=0.0)
    assert folds == [] and watch.logged == [None] * STEPS


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("make, folded, why", [
    (lambda model: torch.optim.SGD(model.parameters(), lr=0.01), False, "is not torch.optim.Adam"),
    (lambda model: torch.optim.AdamW(model.parameters(), lr=0.01), False, "not fused"),
    (lambda model: torch.optim.Adam(model.parameters(), lr=0.01, fused=True), True, None)],
    ids=["sgd", "adamw-not-fused", "adam-fused"])
def test_a_users_optimizer_folds_only_when_it_is_a_fused_torch_adam(tmp_path, folds, make, folded, why):
    trainer, _, watch = _train(tmp_path, "own", compile="true", max_grad_norm=0.05, optimizer=make)
    assert len(folds) == (STEPS // 2 if folded else 0)
    assert (trainer._clipper.refusal is None) if why is None else why in trainer._clipper.refusal
    torch.testing.assert_close(torch.stack(watch.seen), torch.full((STEPS,), 0.05), rtol=1e-5, atol=0)


@pytest.mark.usefixtures("fresh_dynamo")
def test_an_optimizer_over_part_of_the_model_keeps_clip_grad_norm_for_every_gradient(tmp_path, folds):
    """The Trainer clips every trainable parameter's gradient; a fused AdamW over the last layer only would clip
    only that layer's: the first layer's gradients would stay unclipped (a callback saw norms of ~14 for a limit of
    0.05, and, never zeroed by this optimizer, they entered the next steps' norms unclipped)."""
    make = lambda model: torch.optim.AdamW(model[2].parameters(), lr=0.01, fused=True)  # noqa: E731
    trainer, _, watch = _train(tmp_path, "part", compile="true", max_grad_norm=0.05, optimizer=make)
    assert folds == [] and "does not hold every parameter" in trainer._clipper.refusal
    torch.testing.assert_close(torch.stack(watch.seen), torch.full((STEPS,), 0.05), rtol=1e-5, atol=0)


def test_a_grad_scaler_keeps_the_clip_out_of_the_step(monkeypatch):
    """fp16's GradScaler hands the fused kernel its own grad_scale (and the gradients must be unscaled before the
    norm): the clip stays clip_grad_norm_'s."""
    acc = Accelerator(cpu=True)
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = acc.prepare(torch.optim.AdamW([param], lr=0.1, fused=True))
    clipper = clipping.StepClipper(CoreTrainingConfig(max_grad_norm=1.0), acc, [param], measure_unclipped=False,
                                   fold=True)
    clipper.compiled = True
    param.grad = torch.full((3,), 4.0)
    clipper.before_step(optimizer)
    assert optimizer.clip_scale is not None and clipper.refusal is None
    optimizer.clip_scale = None
    monkeypatch.setattr(acc._policy, "scaler", torch.amp.GradScaler("cpu"))
    clipper.before_step(optimizer)  # asked again: the precision changed (as mixed_precision="auto" may)
    assert optimizer.clip_scale is None and "grad scaler" in clipper.refusal


class _Unfreeze:
    """Unfreezes the first layer after step 3 (gradual unfreezing), and records the gradients' norm after each step."""

    def __init__(self):
        self.seen = []

    def on_optimizer_step(self, trainer, state):
        grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
        self.seen.append(torch.nn.utils.get_total_norm(grads))

    def on_step_end(self, trainer, state):
        if state.global_step == 3:
            trainer.model[0].requires_grad_(True)


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("compile", ["false", "true"])
def test_a_layer_unfrozen_mid_run_is_clipped_and_measured_from_then_on(tmp_path, folds, compile):
    """Transformers clips model.parameters() at each step; the Trainer walked the trainable parameters once, at the
    start, so a layer a callback unfroze was neither clipped (a callback saw norms of ~5 for a limit of 0.05) nor in
    grad_norm. Folded (compiled), the fold is asked again once the first layer has gradients."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model[0].requires_grad_(False)
    watch = _Unfreeze()
    config = CoreTrainingConfig(output_dir=str(tmp_path / "out"), use_cpu=True, torch_compile_backend="eager",
                                max_steps=STEPS, per_device_train_batch_size=8, save_strategy="no", disable_tqdm=True,
                                learning_rate=1e-2, compile=compile, max_grad_norm=0.05)
    folding = type("Trainer", (CoreTrainer,), {"folds_clip_into_step": True})
    trainer = folding(model, config, train_dataset=_Data(), loss_fn=torch.nn.functional.mse_loss,
                      optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True), callbacks=[watch])
    trainer.train()
    torch.testing.assert_close(torch.stack(watch.seen), torch.full((STEPS,), 0.05), rtol=1e-5, atol=0)
    assert len(folds) == (STEPS // 2 if compile == "true" else 0)


@pytest.mark.usefixtures("fresh_dynamo")
def test_the_fold_is_off_by_default_even_on_a_compiled_run(tmp_path, folds):
    """On an H200 the fold measured no gain (docs/benchmarks.md Part 3a): a compiled run keeps clip_grad_norm_."""
    assert CoreTrainer.folds_clip_into_step is False
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    config = CoreTrainingConfig(output_dir=str(tmp_path / "out"), use_cpu=True, torch_compile_backend="eager",
                                max_steps=STEPS, per_device_train_batch_size=8, save_strategy="no", disable_tqdm=True,
                                learning_rate=1e-2, compile="true", max_grad_norm=0.05)
    trainer = CoreTrainer(model, config, train_dataset=_Data(), loss_fn=torch.nn.functional.mse_loss,
                          optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True))
    trainer.train()
    assert trainer.accelerator.compile_stats().compiled and folds == []
