"""Transformers Trainer idioms of seeding, overridden loaders and saves: each run under transformers.Trainer and
braeburn.Trainer in the same test, identical (losses per step and evaluation losses bitwise, calls in order)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import braeburn  # noqa: E402
import transformers  # noqa: E402

from ..catalogue import Catalogue, Observation, assert_identical  # noqa: E402
from .test_overrides_called import _recording_trainer  # noqa: E402
from .test_same_seed import _losses, _trainer, peer_env  # noqa: E402,F401  (peer_env: the fixture)

CATALOGUE = Catalogue("transformers")
PEERS = (("transformers", transformers), ("braeburn", braeburn))


def _dropout_runs(tmp_path: Path, **options) -> dict[str, Observation]:
    seen = {}
    for name, lib in PEERS:
        trainer = _trainer(lib, tmp_path / name, **options)
        trainer.train()
        seen[name] = Observation(losses=_losses(trainer), metrics={"eval_loss": _losses(trainer, "eval_loss")})
    return seen


@CATALOGUE.idiom("TrainingArguments(seed=11), a model with dropout, shuffled, 2 epochs, accumulation 2", "identical",
                 "every loss and eval_loss bitwise (a short last window in each epoch)")
def same_seed_same_run(tmp_path: Path) -> None:
    seen = _dropout_runs(tmp_path, model_init=False)
    assert_identical(seen["transformers"], seen["braeburn"])


@CATALOGUE.idiom("Trainer(model_init=build) with a seed", "identical",
                 "the same weights and dropout masks: every loss and eval_loss bitwise")
def model_init_seeded(tmp_path: Path) -> None:
    seen = _dropout_runs(tmp_path, model_init=True)
    assert_identical(seen["transformers"], seen["braeburn"])


@CATALOGUE.idiom("subclass overriding get_train_dataloader / get_eval_dataloader / get_test_dataloader / save_model, "
                 "with a callback's on_save", "identical",
                 "called at the same moments, in the same order; save_model into each checkpoint before on_save")
def overrides_called(tmp_path: Path) -> None:
    seen = {}
    for name, lib in PEERS:
        calls: list = []
        trainer = _recording_trainer(lib, tmp_path / name, calls)
        trainer.train()
        trainer.predict(trainer.eval_dataset)
        seen[name] = Observation(calls=[repr(call) for call in calls])
    assert_identical(seen["transformers"], seen["braeburn"])


@CATALOGUE.idiom("trainer.train(resume_from_checkpoint=<a checkpoint transformers.Trainer wrote>), another output_dir",
                 "identical", "resumed as Transformers resumes it: every loss after it and the last eval_loss bitwise")
def transformers_checkpoint_resumed(tmp_path: Path) -> None:
    _trainer(transformers, tmp_path / "written", save_strategy="steps", save_steps=3).train()
    seen = {}
    for name, lib in PEERS:
        trainer = _trainer(lib, tmp_path / name)
        trainer.train(resume_from_checkpoint=str(tmp_path / "written" / "checkpoint-3"))
        seen[name] = Observation(losses=[record for record in _losses(trainer) if record[0] > 3],
                                 metrics={"eval_loss": _losses(trainer, "eval_loss")[-1:]})
    assert_identical(seen["transformers"], seen["braeburn"])


@pytest.mark.slow  # 7 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("idiom", CATALOGUE.params())
def test_idiom(idiom, peer_env, tmp_path):
    idiom.run(tmp_path)
