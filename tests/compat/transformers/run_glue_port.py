"""A small port of Transformers' examples/pytorch/text-classification/run_glue.py: the same parser, the same
Trainer calls in the same order; the GLUE download and the pretrained BERT are replaced by ``_tiny``'s."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import _tiny

logger = logging.getLogger(__name__)


@dataclass
class DataTrainingArguments:
    task_name: str | None = field(default=None, metadata={"help": "The name of the task to train on"})
    max_seq_length: int = field(default=32, metadata={"help": "The maximum total input sequence length"})
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the training set"})


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="tiny-bert", metadata={"help": "Path to pretrained model"})


def main(lib, argv: list[str], workdir: Path) -> dict:
    parser = lib.HfArgumentParser((ModelArguments, DataTrainingArguments, lib.TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    logging.basicConfig(level=training_args.get_process_log_level())
    logger.warning(f"Process rank: {training_args.local_process_index}, device: {training_args.device}, "
                   f"n_gpu: {training_args.n_gpu}, distributed training: "
                   f"{training_args.parallel_mode.value == 'distributed'}, 16-bits training: {training_args.fp16}")
    from transformers import DataCollatorWithPadding, set_seed
    from transformers.trainer_utils import get_last_checkpoint

    last_checkpoint = None
    if Path(training_args.output_dir).is_dir() and training_args.do_train:
        last_checkpoint = get_last_checkpoint(training_args.output_dir)
    set_seed(training_args.seed)
    tokenizer = _tiny.tokenizer(workdir / "tok")
    model = _tiny.bert(len(tokenizer))
    raw = _tiny.sentence_pairs(48)
    with training_args.main_process_first(desc="dataset map pre-processing"):
        dataset = _tiny.tokenized(raw, tokenizer, max_length=data_args.max_seq_length)
    train_dataset, eval_dataset, predict_dataset = dataset[:32], dataset[32:], dataset[32:]
    if data_args.max_train_samples is not None:
        train_dataset = train_dataset[:data_args.max_train_samples]

    def compute_metrics(p):
        preds = p.predictions[0] if isinstance(p.predictions, tuple) else p.predictions
        preds = np.argmax(preds, axis=1)
        return {"accuracy": (preds == p.label_ids).astype(np.float32).mean().item()}

    trainer = lib.Trainer(model=model, args=training_args, train_dataset=train_dataset if training_args.do_train
                          else None, eval_dataset=eval_dataset if training_args.do_eval else None,
                          compute_metrics=compute_metrics, processing_class=tokenizer,
                          data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8))
    observed = {}
    if training_args.do_train:
        checkpoint = training_args.resume_from_checkpoint or last_checkpoint
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        metrics = train_result.metrics
        metrics["train_samples"] = len(train_dataset)
        trainer.save_model()
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()
        observed["train"] = metrics
    if training_args.do_eval:
        metrics = trainer.evaluate(eval_dataset=eval_dataset)
        metrics["eval_samples"] = len(eval_dataset)
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        observed["eval"] = metrics
    if training_args.do_predict:
        predict_dataset = [{k: v for k, v in row.items() if k != "label"} for row in predict_dataset]
        predictions = trainer.predict(predict_dataset, metric_key_prefix="predict").predictions
        predictions = np.argmax(predictions, axis=1)
        if trainer.is_world_process_zero():
            with open(Path(training_args.output_dir) / "predict_results_mrpc.txt", "w") as writer:
                writer.write("index\tprediction\n")
                for index, item in enumerate(predictions):
                    writer.write(f"{index}\t{item}\n")
        observed["predictions"] = len(predictions)
    trainer.create_model_card(finetuned_from=model_args.model_name_or_path, tasks="text-classification")
    observed["files"] = sorted(p.name for p in Path(training_args.output_dir).iterdir())
    return observed
