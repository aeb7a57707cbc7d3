"""A Trainer subclass's get_train_dataloader, get_eval_dataloader, get_test_dataloader and save_model are called
where the Transformers Trainer calls them (save_model into each checkpoint as it is written), and on_save arrives
right after the save it reports: the calls and their order recorded under both Trainers, in the same test."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import braeburn  # noqa: E402
import transformers  # noqa: E402

from .test_same_seed import Points, _reset_accelerate, peer_env  # noqa: E402,F401  (peer_env: the fixture)


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.layer(x)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


def _recording_trainer(lib: ModuleType, out: Path, calls: list, **overrides):
    class Recording(lib.Trainer):
        def get_train_dataloader(self):
            calls.append(("get_train_dataloader", self.state.global_step))
            return super().get_train_dataloader()

        def get_eval_dataloader(self, eval_dataset=None):
            calls.append(("get_eval_dataloader", self.state.global_step, len(eval_dataset)))
            return super().get_eval_dataloader(eval_dataset)

        def get_test_dataloader(self, test_dataset):
            calls.append(("get_test_dataloader", len(test_dataset)))
            return super().get_test_dataloader(test_dataset)

        def save_model(self, output_dir=None, _internal_call=False):
            calls.append(("save_model", self.state.global_step, Path(output_dir).name, _internal_call))
            super().save_model(output_dir, _internal_call)
            Path(output_dir, "extra.txt").write_text(f"step {self.state.global_step}")

    class Watch(lib.TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir, f"checkpoint-{state.global_step}")
            calls.append(("on_save", state.global_step, (folder / "extra.txt").read_text()))

        def on_evaluate(self, args, state, control, **kwargs):
            calls.append(("on_evaluate", state.global_step))

        def on_step_end(self, args, state, control, **kwargs):
            calls.append(("on_step_end", state.global_step))

    options = dict(output_dir=str(out), per_device_train_batch_size=4, per_device_eval_batch_size=4,
                   num_train_epochs=2, logging_steps=1, seed=7, report_to="none", save_strategy="steps", save_steps=2,
                   eval_strategy="epoch", disable_tqdm=True)
    options.update(overrides)
    _reset_accelerate()
    torch.manual_seed(0)
    return Recording(model=Linear(), args=lib.TrainingArguments(**options), train_dataset=Points(12, 1),
                     eval_dataset=Points(8, 2), callbacks=[Watch()])


def test_overridden_loaders_and_save_model_are_called_where_transformers_calls_them(peer_env, tmp_path):
    recorded = {}
    for name, lib in (("transformers", transformers), ("braeburn", braeburn)):
        calls: list = []
        trainer = _recording_trainer(lib, tmp_path / name, calls)
        trainer.train()
        trainer.predict(Points(4, 3))
        recorded[name] = calls
    assert ("save_model", 2, "checkpoint-2", True) in recorded["transformers"]
    assert ("on_save", 2, "step 2") in recorded["transformers"]
    assert recorded["braeburn"] == recorded["transformers"]


def test_a_checkpoint_save_model_wrote_into_resumes(peer_env, tmp_path):
    calls: list = []
    _recording_trainer(braeburn, tmp_path / "run", calls).train()
    checkpoint = tmp_path / "run" / "checkpoint-4"
    assert (checkpoint / "extra.txt").read_text() == "step 4"
    resumed = _recording_trainer(braeburn, tmp_path / "run", calls := [])
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 6
    assert calls[0] == ("get_train_dataloader", 0) and ("save_model", 6, "checkpoint-6", True) in calls
    assert sorted(os.listdir(tmp_path / "run")).count("checkpoint-6") == 1
