"""Same seed, same run: a model with dropout trained by braeburn.Trainer and by the Transformers Trainer with the
same seed logs the same losses, bitwise on the CPU (shuffled data, several epochs, accumulation with a short last
window, evaluations between epochs, model_init), a resumed braeburn run continues the same run, and a run_glue-like
run keeps the same best checkpoint."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import braeburn  # noqa: E402
import transformers  # noqa: E402

PEERS = {"transformers": transformers, "braeburn": braeburn}


class DropoutNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.dropout, self.out = torch.nn.Linear(4, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 2)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.out(self.dropout(torch.relu(self.hidden(x))))
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


class Points(torch.utils.data.Dataset):
    def __init__(self, count: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(count, 4, generator=generator)
        self.y = (self.x[:, 0] + 0.5 * self.x[:, 1] > 0).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[index], "labels": self.y[index]}


@pytest.fixture
def peer_env(monkeypatch, no_launcher_env, one_thread):
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    _reset_accelerate()
    yield
    _reset_accelerate()


def _reset_accelerate() -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def _trainer(lib: ModuleType, out: Path, *, model_init: bool = True, **overrides):
    """36 samples in batches of 4 with accumulation 2: 9 batches an epoch, so each epoch ends on a window of one."""
    options = dict(output_dir=str(out), per_device_train_batch_size=4, per_device_eval_batch_size=4,
                   gradient_accumulation_steps=2, num_train_epochs=2, learning_rate=0.05, logging_steps=1,
                   logging_strategy="steps", eval_strategy="epoch", save_strategy="no", seed=11,
                   report_to="none", disable_tqdm=True)
    options.update(overrides)
    _reset_accelerate()
    if model_init:
        parts = {"model_init": DropoutNet}
    else:
        torch.manual_seed(3)  # the user's own seed for the weights; the Trainer seeds the run after it
        parts = {"model": DropoutNet()}
    return lib.Trainer(args=lib.TrainingArguments(**options), train_dataset=Points(36, 1),
                       eval_dataset=Points(12, 2), **parts)


def _losses(trainer, key: str = "loss") -> list[tuple[int, float]]:
    return [(record["step"], record[key]) for record in trainer.state.log_history if key in record]


@pytest.mark.parametrize("model_init", [True, False], ids=["model_init", "model"])
def test_dropout_losses_are_bitwise_the_transformers_trainers(peer_env, tmp_path, model_init):
    runs = {}
    for name, lib in PEERS.items():
        trainer = _trainer(lib, tmp_path / name, model_init=model_init)
        trainer.train()
        runs[name] = (_losses(trainer), _losses(trainer, "eval_loss"))
    losses, evaluations = runs["braeburn"]
    assert len(losses) == 10 and len(evaluations) == 2  # 5 steps an epoch (the 5th of one batch), 2 epochs
    assert runs["braeburn"] == runs["transformers"]


def test_a_resumed_run_continues_the_transformers_run(peer_env, tmp_path):
    peer = _trainer(transformers, tmp_path / "peer")
    peer.train()
    first = _trainer(braeburn, tmp_path / "ours", save_strategy="steps", save_steps=3)
    first.train()
    assert _losses(first) == _losses(peer)
    resumed = _trainer(braeburn, tmp_path / "ours", save_strategy="no")  # from mid-epoch 1 (step 3 of 5)
    resumed.train(resume_from_checkpoint=str(tmp_path / "ours" / "checkpoint-3"))
    after = [record for record in _losses(resumed) if record[0] > 3]
    assert after == [record for record in _losses(peer) if record[0] > 3]
    assert _losses(resumed, "eval_loss") == _losses(peer, "eval_loss")


def test_run_glue_like_run_keeps_the_transformers_best_checkpoint(peer_env, tmp_path):
    """run_glue's shape: evaluate and save every epoch, load the best model at the end."""
    chosen = {}
    for name, lib in PEERS.items():
        trainer = _trainer(lib, tmp_path / name, num_train_epochs=4, save_strategy="epoch",
                           load_best_model_at_end=True, metric_for_best_model="eval_loss", greater_is_better=False)
        trainer.train()
        weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        chosen[name] = (Path(trainer.state.best_model_checkpoint).name, trainer.state.best_metric, weights,
                        _losses(trainer, "eval_loss"))
    ours, theirs = chosen["braeburn"], chosen["transformers"]
    assert ours[:2] == theirs[:2] and ours[3] == theirs[3]
    assert ours[2].keys() == theirs[2].keys()
    assert all(torch.equal(ours[2][k], theirs[2][k]) for k in ours[2])


def test_data_seed_orders_the_training_set_as_the_transformers_trainer(peer_env, tmp_path):
    """data_seed seeds the training order (Transformers hands it to Accelerate's seedable sampler); the run's seed
    still draws the weights and dropout. Another order than the plain seed's, and bitwise the peer's."""
    runs = {}
    for name, lib in PEERS.items():
        trainer = _trainer(lib, tmp_path / name, data_seed=5, num_train_epochs=3)
        trainer.train()
        runs[name] = (_losses(trainer), _losses(trainer, "eval_loss"))
    plain = _trainer(braeburn, tmp_path / "plain", num_train_epochs=3)
    plain.train()
    assert _losses(plain) != runs["braeburn"][0]
    assert runs["braeburn"] == runs["transformers"]


def test_dataloader_drop_last_drops_the_short_last_evaluation_batch_as_the_transformers_trainer(peer_env, tmp_path):
    """Transformers' get_eval_dataloader and get_test_dataloader drop a short last batch under
    dataloader_drop_last, as its training loader does: 12 evaluation samples in batches of 5 are 10 evaluated."""
    runs = {}
    for name, lib in PEERS.items():
        trainer = _trainer(lib, tmp_path / name, dataloader_drop_last=True, per_device_eval_batch_size=5)
        trainer.train()
        prediction = trainer.predict(Points(7, 3))
        runs[name] = (_losses(trainer), _losses(trainer, "eval_loss"), prediction.predictions.shape,
                      prediction.label_ids.tolist())
    assert runs["braeburn"][2] == (5, 2)
    assert runs["braeburn"] == runs["transformers"]


def test_evaluate_on_a_dict_of_datasets_is_the_transformers_trainers(peer_env, tmp_path):
    """evaluate(eval_dataset={"a": ..., "b": ...}) evaluates each, its metrics prefixed eval_a_, eval_b_, each logged
    (it was a KeyError from inside the DataLoader); as the Trainer's eval_dataset, a dict is refused before
    training in one line that names the way."""
    runs = {}
    for name, lib in PEERS.items():
        trainer = _trainer(lib, tmp_path / name, eval_strategy="no", num_train_epochs=1, gradient_accumulation_steps=1)
        trainer.train()
        metrics = trainer.evaluate(eval_dataset={"a": Points(6, 3), "b": Points(5, 4)})
        runs[name] = ({k: v for k, v in metrics.items() if not k.endswith(("_runtime", "_per_second"))},
                      [{k: v for k, v in r.items() if not k.endswith(("_runtime", "_per_second"))}
                       for r in trainer.state.log_history])
    assert {"eval_a_loss", "eval_b_loss"} <= set(runs["braeburn"][0])
    assert runs["braeburn"] == runs["transformers"]
    trainer = _trainer(braeburn, tmp_path / "dict", eval_strategy="epoch")
    trainer.eval_dataset = {"a": Points(6, 3), "b": Points(5, 4)}
    with pytest.raises(ValueError, match=r"eval_dataset is a dict of 2 datasets .*trainer.evaluate\(eval_dataset="):
        trainer.train()
    assert not (tmp_path / "dict" / "metrics.jsonl").exists()
