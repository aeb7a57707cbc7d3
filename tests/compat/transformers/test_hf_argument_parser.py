"""Transformers' own HfArgumentParser over braeburn's TrainingArguments: the one-line import change of an
example script (``from braeburn import Trainer, TrainingArguments``) parses as it does with Transformers'
TrainingArguments, and braeburn still refuses what it does not support, with its reason."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

transformers = pytest.importorskip("transformers", reason="compares against Transformers' HfArgumentParser")
import braeburn  # noqa: E402


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="tiny", metadata={"help": "Path to the model"})


@dataclass
class DataTrainingArguments:
    task_name: str | None = None
    max_seq_length: int = 128


ARGV = ["--output_dir", "out", "--do_train", "--do_eval", "--task_name", "mrpc", "--max_seq_length", "64",
        "--per_device_train_batch_size", "4", "--learning_rate", "3e-5", "--num_train_epochs", "2",
        "--eval_strategy", "steps", "--eval_steps", "5", "--save_strategy", "steps", "--save_steps", "5",
        "--warmup_steps", "2", "--lr_scheduler_type", "cosine", "--seed", "7", "--logging_steps", "3",
        "--report_to", "none", "--label_names", "start_positions", "end_positions", "--use_cpu"]


def _parse(arguments_class, argv):
    parser = transformers.HfArgumentParser((ModelArguments, DataTrainingArguments, arguments_class))
    return parser.parse_args_into_dataclasses(args=argv)


def test_transformers_parser_reads_braeburn_training_arguments_as_its_own(tmp_path):
    argv = [*ARGV[:1], str(tmp_path / "out"), *ARGV[2:]]
    hf_model, hf_data, hf_args = _parse(transformers.TrainingArguments, argv)
    model, data, args = _parse(braeburn.TrainingArguments, argv)
    assert (model, data) == (hf_model, hf_data)
    assert isinstance(args, braeburn.TrainingArguments)
    shared = [f.name for f in dataclasses.fields(args) if hasattr(hf_args, f.name)]
    differ = {name: (getattr(hf_args, name), getattr(args, name)) for name in shared
              if name in ("output_dir", "do_train", "do_eval", "per_device_train_batch_size", "learning_rate",
                          "num_train_epochs", "eval_steps", "save_steps", "warmup_steps", "seed",
                          "logging_steps", "label_names", "use_cpu")
              and getattr(hf_args, name) != getattr(args, name)}
    assert differ == {}
    assert str(args.eval_strategy) == "steps" and str(args.lr_scheduler_type).endswith("cosine")


def test_transformers_parser_agrees_with_braeburns(tmp_path):
    argv = [*ARGV[:1], str(tmp_path / "out"), *ARGV[2:]]
    ours = braeburn.HfArgumentParser((ModelArguments, DataTrainingArguments, braeburn.TrainingArguments))
    assert _parse(braeburn.TrainingArguments, argv) == tuple(ours.parse_args_into_dataclasses(args=argv))


@pytest.mark.parametrize("flag", [["--torch_compile"], ["--torch_compile", "false"], ["--torch_compile", "true"], []])
def test_torch_compile_parses_as_under_transformers(tmp_path, flag):
    """A bare --torch_compile (Transformers' docs write it so) is True under either parser, as with Transformers'
    own TrainingArguments; left out, braeburn's stays unset (its compile option decides, saying so)."""
    argv = ["--output_dir", str(tmp_path / "out"), *flag]
    theirs = _parse(transformers.TrainingArguments, argv)[2].torch_compile
    ours = _parse(braeburn.TrainingArguments, argv)[2].torch_compile
    own = braeburn.HfArgumentParser((ModelArguments, DataTrainingArguments, braeburn.TrainingArguments))
    assert ours == own.parse_args_into_dataclasses(args=argv)[2].torch_compile
    assert ours == theirs if flag else (ours is None and theirs is False)


def test_refused_option_parsed_by_transformers_is_refused_by_the_trainer(tmp_path):
    torch = pytest.importorskip("torch")
    *_, args = _parse(braeburn.TrainingArguments, ["--output_dir", str(tmp_path), "--push_to_hub", "--use_cpu"])
    with pytest.raises(braeburn.trainer.ConfigError, match="push_to_hub=True: is a Transformers option braeburn "
                       "does not support: braeburn does not upload"):
        braeburn.Trainer(model=torch.nn.Linear(2, 2), args=args)


def test_refused_options_stay_out_of_transformers_help(capsys):
    with pytest.raises(SystemExit):
        _parse(braeburn.TrainingArguments, ["--help"])
    shown = capsys.readouterr().out
    assert "--learning_rate" in shown and "--push_to_hub" not in shown and "--deepspeed" not in shown
