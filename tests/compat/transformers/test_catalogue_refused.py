"""The Transformers Trainer's idioms braeburn refuses before training, each with the way out (and one it ignores, as
Transformers does), tried under ``braeburn.Trainer`` (tiny BERT, CPU, one thread). See tests/compat/catalogue.py."""

from __future__ import annotations

import pytest
import torch

from tests.compat.catalogue import Catalogue, assert_refused

from ._runs import catalogue_peers  # noqa: F401  (an autouse fixture)
from ._runs import BITWISE, Run, same

CATALOGUE = Catalogue("transformers")
idiom = CATALOGUE.idiom


def register(name: str, how: str = BITWISE, **kwargs):
    idiom(name, "identical", how)(same(**kwargs))


# -- refused before training, with the way out ---------------------------------------------------------------
def refused(args: dict, idiom_words, way_out, **trainer_kwargs):
    def check(tmp_path):
        run = Run("braeburn", tmp_path)
        _, error = run.quietly(lambda: run.trainer(run.args(**args), record=False, **trainer_kwargs).train())
        assert error is not None, "braeburn ran the idiom"
        assert_refused(error, idiom_words, way_out)
        assert not (run.folder / "out" / "metrics.jsonl").exists()  # before training
    return check


idiom("lr_scheduler_type='reduce_lr_on_plateau' without an eval_strategy", "refused",
      "pass --eval_strategy epoch (or steps); Transformers refuses it too")(
    refused(dict(lr_scheduler_type="reduce_lr_on_plateau"), ["reduce_lr_on_plateau"], ["--eval_strategy epoch"]))
idiom("lr_scheduler_type='greedy' (a schedule braeburn does not build)", "refused",
      "pass your own scheduler: optimizers=(optimizer, scheduler)")(
    refused(dict(lr_scheduler_type="greedy"), ["lr_scheduler_type='greedy'"], ["optimizers=(optimizer, scheduler)"]))
idiom("save_only_model=True", "refused", "checkpoints hold the full state; --save_total_limit bounds the disk and "
      "trainer.save_model() writes the weights")(
    refused(dict(save_only_model=True), ["save_only_model"], ["save_total_limit", "save_model()"]))


idiom("group_by_length=True", "refused", "override get_train_dataloader() to return a DataLoader with a "
      "length-grouped sampler (braeburn.Trainer calls it and prepares its loader)")(
    refused(dict(group_by_length=True), ["group_by_length"], ["get_train_dataloader()", "LengthGroupedSampler"]))
register("hub_model_id='me/model', hub_strategy='end' with push_to_hub=False (ignored, as Transformers)",
         args=dict(hub_model_id="me/model", hub_strategy="end", max_steps=2))


class _Stream(torch.utils.data.IterableDataset):
    def __init__(self, rows):
        self.rows = rows

    def __iter__(self):
        return iter(self.rows)


idiom("a streaming IterableDataset as train_dataset", "refused", "pass a map-style dataset (with __len__)")(
    refused(dict(max_steps=3), ["IterableDataset"], ["map-style dataset"],
            train_dataset=_Stream([{"input_ids": [2, 3], "label": 0}])))


@idiom("compute_metrics returning a list", "refused", "return a dict of named metrics (Transformers fails with a "
       "TypeError inside its loop)")
def _metrics_list(tmp_path):
    run = Run("braeburn", tmp_path)
    trainer = run.trainer(run.args(), record=False, compute_metrics=lambda p: [0.5])
    _, error = run.quietly(trainer.evaluate)
    assert_refused(error, ["compute_metrics returned a list"], ["return a dict"])


# -- the test: one per idiom (last, so that every idiom above is registered) -----------------------------------
@pytest.mark.slow  # the catalogue took 62 s as one file with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)
