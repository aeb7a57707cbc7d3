"""Scripts written before the package was laid out by concern import the Trainer from braeburn.trainer and
braeburn.trainer.loop: they get braeburn.Trainer, whose Transformers overrides, arguments and files they relied on;
and braeburn's own core Trainer refuses a subclass whose Transformers overrides it would never call."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

import braeburn
from braeburn.trainer.loop import CoreTrainer

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts_before_layout"


def _data():
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, (x.sum(1) > 0).long())


def _config(tmp_path, config_class=None):
    config_class = config_class or braeburn.TrainingArguments
    return config_class(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=8, use_cpu=True,
                        save_strategy="no", disable_tqdm=True, report_to="none")


def test_a_subclass_of_the_old_path_trainer_has_its_overrides_called(tmp_path):
    from braeburn.trainer import Trainer, TrainingArguments

    calls = []

    class Counting(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            calls.append("compute_loss")
            features, labels = inputs
            return torch.nn.functional.cross_entropy(model(features), labels)

        def log(self, logs, start_time=None):
            calls.append("log")
            super().log(logs, start_time)

    trainer = Counting(torch.nn.Linear(4, 2), _config(tmp_path, TrainingArguments), train_dataset=_data())
    trainer.train()
    assert calls.count("compute_loss") == 2 and "log" in calls
    assert trainer.args is trainer.config and trainer.args.eval_batch_size == 8  # Transformers' names


def test_the_core_trainer_refuses_a_subclass_with_transformers_overrides_it_never_calls(tmp_path):
    class Custom(CoreTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            raise AssertionError("never reached")

        def log(self, logs, start_time=None):
            pass

    with pytest.raises(TypeError) as refused:
        Custom(torch.nn.Linear(4, 2), _config(tmp_path, braeburn.trainer.CoreTrainingConfig), train_dataset=_data())
    message = str(refused.value)
    assert "defines compute_loss, log:" in message and "braeburn.Trainer" in message and "\n" not in message


def test_a_core_subclass_without_transformers_overrides_trains(tmp_path):
    class Quiet(CoreTrainer):
        def _say(self, text):  # a method of its own: not one of Transformers'
            return text

    config = _config(tmp_path, braeburn.trainer.CoreTrainingConfig)
    trainer = Quiet(torch.nn.Linear(4, 2), config, train_dataset=_data(), loss_fn=torch.nn.functional.cross_entropy)
    assert trainer.train().global_step == 2


def _write_mrpc(folder: Path) -> Path:
    folder.mkdir()
    words = "the company said shares rose fell on monday profit deal market stock bank price".split()
    for name, count in (("train.tsv", 16), ("dev.tsv", 8)):
        rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(count):
            first = " ".join(words[(i + k) % len(words)] for k in range(6))
            second = " ".join(reversed(first.split())) if i % 2 else " ".join(words[(i * 3 + k) % len(words)]
                                                                              for k in range(6))
            rows.append(f"{i % 2}\t{i}\t{i + 100}\t{first}\t{second}")
        (folder / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


@pytest.mark.slow  # 31 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_the_text_example_from_before_the_layout_writes_loadable_checkpoints_unchanged(tmp_path):
    """The text example as it was (``from braeburn.trainer.loop import Trainer``), run unchanged: its checkpoints
    hold the model's config.json, so from_pretrained(checkpoint) loads them, as they did when it was written."""
    for helper in ("_text.py", "_metrics.py"):
        shutil.copy(ROOT / "examples" / helper, tmp_path / helper)
    script = shutil.copy(SCRIPTS / "text_classification.py.txt", tmp_path / "text_classification.py")
    data, out = _write_mrpc(tmp_path / "MRPC"), tmp_path / "out"
    done = subprocess.run([sys.executable, script, "--task_name", "mrpc", "--data_dir", str(data), "--max_seq_length",
                           "16", "--use_cpu", "--do_train", "--max_steps", "2", "--save_steps", "2", "--hidden_size",
                           "16", "--num_hidden_layers", "1", "--per_device_train_batch_size", "8", "--output_dir",
                           str(out), "--disable_tqdm", "true", "--report_to", "none"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr[-3000:]
    from transformers import AutoModelForSequenceClassification

    assert (out / "checkpoint-2" / "config.json").is_file() and (out / "checkpoint-2" / "training_args.bin").is_file()
    model = AutoModelForSequenceClassification.from_pretrained(out / "checkpoint-2", local_files_only=True)
    assert model.config.num_labels == 2


def test_training_args_pickled_before_the_layout_load_as_the_public_arguments():
    """A checkpoint's training_args.bin written before the layout (class path braeburn.trainer.config.TrainingConfig,
    which was then the public class, one with braeburn.TrainingArguments) loads as braeburn.TrainingConfig, the public
    arguments with braeburn's defaults (a field its file lacks takes the default it had then), with Transformers'
    names."""
    loaded = torch.load(SCRIPTS / "training_args.bin", weights_only=False)
    assert type(loaded) is braeburn.TrainingConfig and isinstance(loaded, braeburn.TrainingArguments)
    assert (loaded.max_steps, loaded.train_batch_size, loaded.eval_batch_size, str(loaded.device)) == (4, 8, 8, "cpu")
    assert loaded.to_dict()["save_steps"] == 2


def test_training_args_missing_a_field_added_since_load_with_its_default(tmp_path):
    import pickle

    arguments = braeburn.TrainingArguments(output_dir=str(tmp_path), max_steps=3)
    older = pickle.loads(pickle.dumps(arguments))
    state = dict(vars(arguments))
    del state["nan_policy"], state["report_to"]  # as if written before these fields existed
    older.__dict__.clear()
    older.__setstate__(state)
    assert older.max_steps == 3 and older.nan_policy == "stop" and older.report_to == arguments.report_to
