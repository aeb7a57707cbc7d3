"""One idiom run under the Transformers Trainer and under braeburn's, and what a user sees of each run.

:func:`run` builds a tiny BERT (one layer, no dropout), tiny sentence-pair data and the Trainer of one library
(``transformers`` or ``braeburn``), with the idiom's ``TrainingArguments`` fields and ``Trainer`` arguments, trains
(or calls what the idiom calls) and returns an :class:`~tests.compat.catalogue.Observation`: the loss of every
logged step, the logged records (timings reduced to their names), the callback hooks in their order, the
checkpoint folders (braeburn's own metrics.jsonl and training_curves.png beside them are its documented files, not
compared), and the error, if any. Both libraries read the data in order (``train_sampling_strategy=
"sequential"``) and start from the same weights, so the arithmetic is the same and the losses are compared bitwise.
"""

from __future__ import annotations

import importlib
import io
import random
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from tests.compat.catalogue import Observation, assert_identical

LIBS = ("transformers", "braeburn")
WORDS = ("the cat dog sat ran on mat log a big small red blue house tree car fast slow happy sad good bad "
         "is was and or not very").split()
HOOKS = ("on_init_end", "on_train_begin", "on_epoch_begin", "on_step_begin", "on_optimizer_step", "on_step_end",
         "on_log", "on_evaluate", "on_save", "on_epoch_end", "on_train_end", "on_predict")
TIMING = ("_runtime", "_per_second")  # values that depend on the clock: compared by name only


def tokenizer(folder: Path):
    from transformers import BertTokenizerFast

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    return BertTokenizerFast(vocab={token: index for index, token in enumerate(tokens)}, do_lower_case=True)


def bert(vocab_size: int, seed: int = 0, labels: int = 2):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=labels,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertForSequenceClassification(config)


def rows(count: int, tok, seed: int = 0) -> list[dict]:
    """run_glue's tokenized rows: the raw columns kept, token ids added, a label."""
    rng = random.Random(seed)
    out = []
    for index in range(count):
        first = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))
        second = first if index % 2 else " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))
        out.append({"sentence1": first, "sentence2": second, "label": index % 2, "idx": index,
                    **tok(first, second, truncation=True, max_length=32)})
    return out


def accuracy(eval_pred) -> dict[str, float]:
    predictions, labels = eval_pred
    return {"accuracy": float((np.argmax(predictions, -1) == labels).mean())}


def recorder(lib: Any, calls: list[str]) -> Any:
    """A callback of ``lib``'s TrainerCallback class that records every hook called, in order."""

    def hook(name: str) -> Callable[..., None]:
        def record(self, args, state, control, **kwargs):
            calls.append(f"{name}@{state.global_step}")
        return record

    return type("Recorder", (lib.TrainerCallback,), {name: hook(name) for name in HOOKS})()


def library(name: str) -> Any:
    return importlib.import_module(name)


class Run:
    """One library's pieces for an idiom: ``lib``, tokenizer, train/eval rows, a fresh model, the arguments."""

    def __init__(self, name: str, tmp_path: Path, train: int = 16, evals: int = 8):
        self.name, self.lib = name, library(name)
        self.folder = tmp_path / name
        self.tok = tokenizer(self.folder / "tok")
        data = rows(train + evals, self.tok)
        self.train, self.evals = data[:train], data[train:]
        self.calls: list[str] = []
        self.printed = ""

    def model(self, **kwargs: Any) -> Any:
        return bert(len(self.tok), **kwargs)

    def args(self, **fields: Any) -> Any:
        base = dict(output_dir=str(self.folder / "out"), use_cpu=True, disable_tqdm=True, learning_rate=1e-3,
                    per_device_train_batch_size=4, per_device_eval_batch_size=4, num_train_epochs=2,
                    train_sampling_strategy="sequential", report_to="none", logging_steps=1, save_strategy="no")
        base.update(fields)
        return self.lib.TrainingArguments(**base)

    def trainer(self, args: Any = None, record: bool = True, **kwargs: Any) -> Any:
        from transformers import DataCollatorWithPadding

        parts = dict(model=self.model(), args=args if args is not None else self.args(),
                     train_dataset=self.train, eval_dataset=self.evals,
                     data_collator=DataCollatorWithPadding(self.tok))
        parts.update(kwargs)
        if record:
            parts["callbacks"] = [*(parts.get("callbacks") or []), recorder(self.lib, self.calls)]
        return self.lib.Trainer(**parts)

    def quietly(self, action: Callable[[], Any]) -> tuple[Any, BaseException | None]:
        """``action()``'s result, or the error it raised; what it printed and warned is kept in ``printed``."""
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result, error = action(), None
            except Exception as raised:  # noqa: BLE001 - the error is what the idiom observes
                result, error = None, raised
        self.printed = out.getvalue() + err.getvalue() + "".join(f"{w.message}\n" for w in caught)
        return result, error


def timing_view(key: str, value: Any) -> Any:
    """A value that depends on the clock, as compared: its presence, and whether it is rounded as Transformers'
    speed_metrics rounds it (runtime to 4 places, the rates to 3)."""
    if not key.endswith(TIMING):
        return value
    places = 4 if key.endswith("_runtime") else 3
    return "<timing>" if isinstance(value, (int, float)) and round(value, places) == value else f"<timing> {value!r}"


def history_view(history: list[dict]) -> list[dict]:
    """log_history as compared: timing values replaced by their names' presence (and rounding)."""
    return [{key: timing_view(key, value) for key, value in record.items()} for record in history]


def checkpoint_names(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(path.name for path in folder.iterdir() if path.name.startswith("checkpoint-"))


def observe(run: Run, trainer: Any, result: Any, error: BaseException | None, **extra: Any) -> Observation:
    history = list(trainer.state.log_history) if trainer is not None else []
    return Observation(losses=[record["loss"] for record in history if "loss" in record],
                       metrics={"log_history": history_view(history)}, calls=list(run.calls),
                       files=checkpoint_names(run.folder / "out"),
                       exit=None if error is None else f"{type(error).__name__}", extra=extra)


def train_both(tmp_path: Path, args: dict | None = None, after: Callable[[Any, Any], dict] | None = None,
               train_rows: int = 16, **trainer_kwargs: Any) -> tuple[Observation, Observation, list[Run]]:
    """The idiom's training run under each library: (Transformers' observation, braeburn's, the two runs)."""
    seen, runs = [], []
    for name in LIBS:
        run = Run(name, tmp_path, train=train_rows)
        kwargs = {key: (value(run) if callable(value) and getattr(value, "per_run", False) else value)
                  for key, value in trainer_kwargs.items()}
        trainer = run.trainer(run.args(**(args or {})), **kwargs)
        result, error = run.quietly(trainer.train)
        extra = after(run, trainer) if after is not None and error is None else {}
        if result is not None:
            extra["train_output"] = train_output_view(result)
        seen.append(observe(run, trainer, result, error, **extra))
        runs.append(run)
    return seen[0], seen[1], runs


def per_run(make: Callable[[Run], Any]) -> Callable[[Run], Any]:
    """A Trainer argument built for each run (its own library's class, tokenizer or rows)."""
    make.per_run = True
    return make


def train_output_view(output: Any) -> dict:
    step, loss, metrics = output
    return {"global_step": step, "training_loss": loss,
            "metrics": {key: timing_view(key, value) for key, value in metrics.items()}}


# -- the catalogue's pieces (test_catalogue*.py) ---------------------------------------------------------------
BITWISE = "bitwise: losses, logged records, callback calls, checkpoint folders, TrainOutput"


@pytest.fixture(autouse=True)
def catalogue_peers(monkeypatch, no_launcher_env, one_thread):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    monkeypatch.setenv("WANDB_DISABLED", "true")
    # braeburn's training_curves.png (its own file, not compared: docs/migrating.md) costs half a second a run
    monkeypatch.setattr("braeburn.trainer.plots.plot_history", lambda history, path: None)
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def same(args: dict | None = None, after=None, **trainer_kwargs):
    """An idiom whose whole run is identical under both libraries."""

    def check(tmp_path):
        peer, ours, _ = train_both(tmp_path, args, after, **trainer_kwargs)
        assert peer.exit is None, f"the idiom fails under Transformers too: {peer.exit}"
        assert_identical(peer, ours)
    return check


def saves(args: dict):
    """An idiom whose run is identical under both libraries, checkpoint folders included (on_save's moment left out:
    the seed catalogue's)."""

    def check(tmp_path):
        peer, ours, _ = train_both(tmp_path, args)
        for seen in (peer, ours):
            seen.calls = [call for call in seen.calls if not call.startswith("on_save")]
        assert_identical(peer, ours)
    return check


SAVES = "bitwise, and the same checkpoint-N folders (on_save's moment is left out here)"
