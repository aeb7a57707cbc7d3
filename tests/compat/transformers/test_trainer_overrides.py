"""A Transformers Trainer subclass, with only the import switched: each overridden method is called, and an
override changes the run as it does under Transformers (the same weights and losses, on the same data)."""

from __future__ import annotations

import pytest
import torch

STEPS_TOLERANCE = dict(rtol=1e-5, atol=1e-6)  # full-batch steps: only the summation order may differ


class Regressor(torch.nn.Module):
    """No dropout, no randomness: the same weights from the same seed in both libraries."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x, labels=None):
        logits = self.linear(x).squeeze(-1)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.mse_loss(logits, labels)
        return out


def _rows(count: int = 8) -> list[dict]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(count, 4, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1
    return [{"x": x[i], "labels": y[i]} for i in range(count)]


def _args(lib, tmp_path, **overrides):
    options = dict(output_dir=str(tmp_path / lib.name), per_device_train_batch_size=8, per_device_eval_batch_size=8,
                   num_train_epochs=3, learning_rate=0.05, use_cpu=True, report_to="none", save_strategy="no",
                   logging_steps=1, seed=0, disable_tqdm=True, lr_scheduler_type="constant",
                   optim="sgd", max_grad_norm=0.0)  # plain SGD, no clipping: a scaled loss is a larger step
    options.update(overrides)
    return lib.TrainingArguments(**options)


def _trained(lib, tmp_path, trainer_class=None, **overrides):
    trainer_class = trainer_class or lib.Trainer
    trainer = trainer_class(model=Regressor(), args=_args(lib, tmp_path, **overrides), train_dataset=_rows(),
                            eval_dataset=_rows(4))
    trainer.train()
    return trainer


def _weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()}


def _losses(trainer) -> list[float]:
    return [record["loss"] for record in trainer.state.log_history if "loss" in record]


def _peer_weights(hf_lib, tmp_path, make_class, **overrides):
    """(braeburn's or Transformers' weights with the override, the same without it) for the library under test."""
    with_override = _trained(hf_lib, tmp_path / "with", make_class(hf_lib.Trainer), **overrides)
    plain = _trained(hf_lib, tmp_path / "plain", **overrides)
    return with_override, plain


def _scaled_compute_loss(base):
    class ScaledLoss(base):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss, outputs = super().compute_loss(model, inputs, return_outputs=True,
                                                 num_items_in_batch=num_items_in_batch)
            loss = loss * 3
            return (loss, outputs) if return_outputs else loss
    return ScaledLoss


def _quartered_training_step(base):
    class QuarterStep(base):
        def training_step(self, model, inputs, num_items_in_batch=None):
            model.train()
            loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch) * 0.25
            self.accelerator.backward(loss)
            return loss.detach()
    return QuarterStep


def _sgd_with_decay(base):
    class OwnOptimizer(base):
        def create_optimizer(self, model=None):
            if self.optimizer is None:
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.5)
            return self.optimizer

        def create_scheduler(self, num_training_steps, optimizer=None):
            if self.lr_scheduler is None:
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer,
                                                                      lambda step: 1.0 / (1 + step))
            return self.lr_scheduler
    return OwnOptimizer


@pytest.fixture(scope="module")
def transformers_runs(tmp_path_factory):
    """The reference weights and losses, once: each override under the real Transformers Trainer."""
    transformers = pytest.importorskip("transformers", reason="the reference is Transformers' Trainer")
    pytest.importorskip("accelerate", reason="Transformers' Trainer needs accelerate")
    from types import SimpleNamespace

    lib = SimpleNamespace(name="transformers", Trainer=transformers.Trainer,
                          TrainingArguments=transformers.TrainingArguments)
    runs = {}
    for name, make, overrides in CASES:
        trainer = _trained(lib, tmp_path_factory.mktemp(name), make(lib.Trainer), **overrides)
        runs[name] = (_weights(trainer), _losses(trainer))
    return runs


CASES = [("compute_loss", _scaled_compute_loss, {}),
         ("compute_loss_accumulated", _scaled_compute_loss, {"per_device_train_batch_size": 4,
                                                              "gradient_accumulation_steps": 2}),
         ("training_step", _quartered_training_step, {}),
         ("training_step_accumulated", _quartered_training_step, {"per_device_train_batch_size": 4,
                                                                "gradient_accumulation_steps": 2}),
         ("create_optimizer", _sgd_with_decay, {})]


@pytest.fixture
def braeburn_lib(monkeypatch, no_launcher_env, one_thread):
    import braeburn
    from types import SimpleNamespace

    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    return SimpleNamespace(name="braeburn", Trainer=braeburn.Trainer, TrainingArguments=braeburn.TrainingArguments)


@pytest.mark.slow  # 9 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_override_changes_the_weights_as_in_transformers(case, transformers_runs, braeburn_lib, tmp_path):
    _, make, overrides = next(c for c in CASES if c[0] == case)
    with_override, plain = _peer_weights(braeburn_lib, tmp_path, make, **overrides)
    expected_weights, expected_losses = transformers_runs[case]
    assert any(not torch.allclose(w, p) for w, p in zip(_weights(with_override).values(), _weights(plain).values()))
    for name, weight in _weights(with_override).items():
        torch.testing.assert_close(weight, expected_weights[name], **STEPS_TOLERANCE)
    assert _losses(with_override) == pytest.approx(expected_losses, rel=1e-5)


def test_every_overridden_method_is_called(hf_lib, tmp_path):
    called: list[str] = []

    class Recording(hf_lib.Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            called.append("training_step")
            return super().training_step(model, inputs, num_items_in_batch)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            called.append("compute_loss")
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

        def create_optimizer(self, model=None):
            called.append("create_optimizer")
            return super().create_optimizer()

        def create_scheduler(self, num_training_steps, optimizer=None):
            called.append("create_scheduler")
            return super().create_scheduler(num_training_steps, optimizer)

        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
            called.append("prediction_step")
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)

        def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None,
                            metric_key_prefix="eval"):
            called.append("evaluation_loop")
            return super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys,
                                           metric_key_prefix)

        def log(self, logs, start_time=None):
            called.append("log")
            return super().log(logs, start_time)

    trainer = _trained(hf_lib, tmp_path, Recording, eval_strategy="epoch")
    assert set(called) == {"training_step", "compute_loss", "create_optimizer", "create_scheduler",
                           "prediction_step", "evaluation_loop", "log"}
    assert called.count("create_optimizer") == 1 and called.count("create_scheduler") == 1
    assert called.count("training_step") == 3  # one per batch
    assert any("eval_loss" in record for record in trainer.state.log_history)
    assert "train_runtime" in trainer.state.log_history[-1]  # train() ends with self.log(metrics)


def test_evaluation_overrides_change_the_metrics(hf_lib, tmp_path):
    logged: list[dict] = []

    class Custom(hf_lib.Trainer):
        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
            loss, logits, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
            return (None if loss is None else loss * 2), logits, labels

        def evaluation_loop(self, *args, **kwargs):
            output = super().evaluation_loop(*args, **kwargs)
            output.metrics[f"{kwargs.get('metric_key_prefix', 'eval')}_extra"] = 7.0
            return output

        def log(self, logs, start_time=None):
            logged.append(dict(logs))  # and nothing else: log_history gets no record, as in Transformers

    trainer = Custom(model=Regressor(), args=_args(hf_lib, tmp_path), eval_dataset=_rows(4))
    plain = hf_lib.Trainer(model=Regressor(), args=_args(hf_lib, tmp_path / "plain"), eval_dataset=_rows(4))
    metrics = trainer.evaluate()
    assert metrics["eval_extra"] == 7.0
    assert metrics["eval_loss"] == pytest.approx(2 * plain.evaluate()["eval_loss"], rel=1e-6)
    assert any(record.get("eval_extra") == 7.0 for record in logged)
    assert not any("eval_extra" in record for record in trainer.state.log_history)


def test_compute_loss_override_gives_the_eval_loss(hf_lib, tmp_path):
    """Transformers' prediction_step computes the evaluation loss through compute_loss(return_outputs=True)."""
    ScaledLoss = _scaled_compute_loss(hf_lib.Trainer)
    scaled = ScaledLoss(model=Regressor(), args=_args(hf_lib, tmp_path), eval_dataset=_rows(4)).evaluate()
    plain = hf_lib.Trainer(model=Regressor(), args=_args(hf_lib, tmp_path / "plain"), eval_dataset=_rows(4)).evaluate()
    assert scaled["eval_loss"] == pytest.approx(3 * plain["eval_loss"], rel=1e-6)


def test_a_compute_loss_that_pops_the_labels_leaves_a_pre_batched_dataset_whole(hf_lib, tmp_path):
    """Transformers' docs pop the labels in compute_loss (``labels = inputs.pop("labels")``); its Trainer hands
    compute_loss a copy of the collated dict. With a dataset of ready batches (the collator returns a sample as
    it is), the second epoch and the evaluation still find their labels, and both libraries train the same."""
    class PopLabels(hf_lib.Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            loss = torch.nn.functional.mse_loss(outputs["logits"], labels)
            return (loss, outputs) if return_outputs else loss

    rows = _rows(8)
    batches = [{"x": torch.stack([r["x"] for r in rows[i:i + 4]]),
                "labels": torch.stack([r["labels"] for r in rows[i:i + 4]])} for i in (0, 4)]
    trainer = PopLabels(model=Regressor(), args=_args(hf_lib, tmp_path, per_device_train_batch_size=1,
                                                      num_train_epochs=2, remove_unused_columns=False),
                        train_dataset=batches, eval_dataset=batches, data_collator=lambda samples: samples[0])
    trainer.train()
    assert all(set(batch) == {"x", "labels"} for batch in batches)
    assert "eval_loss" in trainer.evaluate()
    assert len(_losses(trainer)) == 4
