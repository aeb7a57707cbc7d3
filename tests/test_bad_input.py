"""Bad input, from a table: every wrong option or input gives one clear error naming it and the fix.

Each in-process case must raise an error that braeburn raised on purpose (``errors.is_user_error``:
ConfigError/PlanError, or raised from braeburn's own code, never from deep inside torch), whose text
holds the option or input and the fix; ``run_main`` (what the examples end with) then prints that one
message without a traceback. The command-line cases run the example or the `braeburn` CLI as real
processes and read stderr: no traceback without --debug, a traceback with it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

from braeburn.accelerator.core import Accelerator
from braeburn.errors import is_user_error, run_main
from braeburn.plan.rules import make_plan
from braeburn.trainer import Trainer, TrainingConfig, parse_config
from braeburn.devices.host import current_host

ROOT = Path(__file__).resolve().parents[1]
IMAGE_EXAMPLE = ROOT / "examples" / "image_classification.py"


pytestmark = pytest.mark.usefixtures("one_thread")


# -- helpers for the cases ----------------------------------------------------------------------
def cli(*argv: str) -> None:
    parse_config(TrainingConfig, argv=list(argv), exit_on_error=False)


def config_file(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text)
    return str(path)


def data(n: int = 16, classes: int = 3, low: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 4, generator=generator), torch.randint(low, low + classes, (n,),
                                                                                generator=generator))


def trainer(tmp: Path, model: torch.nn.Module | None = None, train=None, loss_fn=torch.nn.functional.cross_entropy,
            **options) -> Trainer:
    config = TrainingConfig(**{"output_dir": str(tmp / "out"), "per_device_train_batch_size": 4, "max_steps": 2,
                               "save_strategy": "no", "logging_steps": 1, "use_cpu": True, **options})
    return Trainer(model or torch.nn.Linear(4, 3), config, train_dataset=data() if train is None else train,
                   loss_fn=loss_fn)


class TokenIds(Dataset):
    """Dict samples for a Transformers-style model; ``dtype`` of the token ids is the bad input."""

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": torch.arange(5, dtype=self.dtype), "labels": torch.tensor(index % 2)}


class EmbeddingModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 2)

    def forward(self, input_ids, labels=None):
        logits = self.head(self.embed(input_ids).mean(1))
        return {"logits": logits, "loss": torch.nn.functional.cross_entropy(logits, labels)}


def from_other_model(tmp: Path) -> None:
    first = trainer(tmp, torch.nn.Sequential(torch.nn.Linear(4, 3)), save_strategy="steps", save_steps=2)
    first.train()
    second = trainer(tmp, torch.nn.Sequential(torch.nn.Linear(4, 5)))  # 5 classes, not 3
    second.train(resume_from_checkpoint=str(tmp / "out" / "checkpoint-2"))


def output_dir_is_a_file(tmp: Path) -> None:
    (tmp / "taken").write_text("")
    cli("--output_dir", str(tmp / "taken"))


# (id, fake host or None, the bad input, words the error must hold)
CASES = [
    # -- options: names, types, values ----------------------------------------------------------
    ("unknown option", None, lambda t: cli("--learning_rat", "1e-3"), ["--learning_rat", "did you mean --learning_rate"]),
    ("misspelt logging_steps", None, lambda t: cli("--loging_steps", "5"), ["--loging_steps", "did you mean --logging_steps"]),
    ("stray value", None, lambda t: cli("stray"), ["'stray'", "--name value"]),
    ("wrong type int", None, lambda t: cli("--per_device_train_batch_size", "eight"),
     ["per_device_train_batch_size='eight'", "whole number"]),
    ("wrong type float", None, lambda t: cli("--learning_rate", "fast"), ["learning_rate='fast'", "e.g. 2e-5"]),
    ("wrong type bool", None, lambda t: cli("--do_train", "maybe"), ["do_train='maybe'", "true or false"]),
    ("negative batch size", None, lambda t: cli("--per_device_train_batch_size", "-4"),
     ["per_device_train_batch_size=-4", "pass --per_device_train_batch_size 1 or more"]),
    ("zero eval batch size", None, lambda t: cli("--per_device_eval_batch_size", "0"),
     ["per_device_eval_batch_size=0", ">= 1"]),
    ("accumulation 0", None, lambda t: cli("--gradient_accumulation_steps", "0"),
     ["gradient_accumulation_steps=0", "pass --gradient_accumulation_steps 1"]),
    ("learning rate 0", None, lambda t: cli("--learning_rate", "0"), ["learning_rate=0.0", "e.g. --learning_rate 5e-5"]),
    ("warmup_ratio 2", None, lambda t: cli("--warmup_ratio", "2"), ["warmup_ratio=2.0", "[0, 1)", "--warmup_ratio 0.1"]),
    ("negative warmup", None, lambda t: cli("--warmup_steps", "-1"), ["warmup_steps=-1", ">= 0"]),
    ("scheduler typo", None, lambda t: cli("--lr_scheduler_type", "cosin"),
     ["lr_scheduler_type='cosin'", "linear, cosine, cosine_with_restarts, constant"]),
    ("eval strategy typo", None, lambda t: cli("--eval_strategy", "sometimes"), ["eval_strategy='sometimes'", "no, steps"]),
    ("save strategy typo", None, lambda t: cli("--save_strategy", "step"), ["save_strategy='step'", "no, steps, epoch"]),
    ("max_steps 0 epochs 0", None, lambda t: cli("--max_steps", "0", "--num_train_epochs", "0"),
     ["2 problems", "max_steps=0", "or -1", "num_train_epochs=0.0", "must be > 0"]),
    ("beta1 1.5", None, lambda t: cli("--adam_beta1", "1.5"), ["adam_beta1=1.5", "e.g. 0.9"]),
    ("negative weight decay", None, lambda t: cli("--weight_decay", "-0.1"), ["weight_decay=-0.1", ">= 0"]),
    ("negative grad norm", None, lambda t: cli("--max_grad_norm", "-1"), ["max_grad_norm=-1.0", "pass --max_grad_norm 0"]),
    ("save_total_limit 0", None, lambda t: cli("--save_total_limit", "0"), ["save_total_limit=0", "unset"]),
    ("eval_steps 0", None, lambda t: cli("--eval_steps", "0"), ["eval_steps=0", ">= 1"]),
    ("logging_steps 0", None, lambda t: cli("--logging_steps", "0"), ["logging_steps=0", ">= 1"]),
    ("nan policy typo", None, lambda t: cli("--nan_policy", "ignore"), ["nan_policy='ignore'", "stop, skip"]),
    ("negative workers", None, lambda t: cli("--dataloader_num_workers", "-2"), ["dataloader_num_workers=-2", ">= 0"]),
    ("output_dir is a file", None, output_dir_is_a_file, ["output_dir=", "is a file", "pass a folder"]),
    ("empty output_dir", None, lambda t: cli("--output_dir", " "), ["output_dir=' '", "must name a folder"]),
    ("compile maybe", None, lambda t: cli("--compile", "maybe"), ["compile='maybe'", "auto, true, false or regional"]),
    # -- the device: faked host facts ------------------------------------------------------------
    ("unknown accelerator", None, lambda t: cli("--accelerator", "tpu"), ["accelerator='tpu'", "choose one of"]),
    ("precision typo", None, lambda t: cli("--mixed_precision", "fp8"), ["mixed_precision='fp8'", "choose one of"]),
    ("bf16 on macOS 13", {"base": "apple", "macos_version": (13, 6)},
     lambda t: cli("--accelerator", "mps", "--mixed_precision", "bf16"), ["mixed_precision='bf16'", "macOS 14", "--mixed_precision no"]),
    ("bf16 on a Turing GPU", {"base": "cuda", "cuda_capabilities": ((7, 5), (7, 5))},
     lambda t: cli("--mixed_precision", "bf16"), ["mixed_precision='bf16'", "8.0", "--mixed_precision no"]),
    ("cuda on a CPU machine", {"base": "linux_cpu"}, lambda t: cli("--accelerator", "cuda"),
     ["accelerator='cuda'", "CUDA is not available", "--cpu"]),
    ("more devices than exist", {"base": "cuda"}, lambda t: cli("--devices", "4"), ["devices=4", "has 2 usable cuda", "devices=2"]),
    ("devices 0", {"base": "cuda"}, lambda t: cli("--devices", "0"), ["devices=0", ">= 1, or 'auto'"]),
    ("several processes on MPS", {"base": "apple"},
     lambda t: make_plan(TrainingConfig(accelerator="mps").run_options(num_processes=2), current_host()),
     ["num_processes=2", "cannot run on mps", "--cpu"]),
    ("Accelerator accumulation 0", None, lambda t: Accelerator(cpu=True, gradient_accumulation_steps=0),
     ["gradient_accumulation_steps=0", ">= 1"]),
    # -- config files ------------------------------------------------------------------------------
    ("missing config file", None, lambda t: cli("--config", str(t / "nope.toml")), ["config=", "nope.toml", "no such file"]),
    ("broken TOML", None, lambda t: cli("--config", config_file(t, "c.toml", "learning_rate = = 1")),
     ["c.toml", "cannot be read as .toml"]),
    ("unknown key in a file", None, lambda t: cli("--config", config_file(t, "c.yaml", "learning_rat: 0.1\n")),
     ["learning_rat", "c.yaml", "did you mean --learning_rate"]),
    ("wrong type in a file", None, lambda t: cli("--config", config_file(t, "c.toml", 'num_train_epochs = "many"\n')),
     ["num_train_epochs='many'", "c.toml", "expected a number"]),
    ("a list, not a table", None, lambda t: cli("--config", config_file(t, "c.yaml", "- 1\n- 2\n")),
     ["c.yaml", "table of option = value pairs"]),
    ("code in a YAML file", None,
     lambda t: cli("--config", config_file(t, "c.yaml", "learning_rate: !!python/object/apply:os.getcwd []\n")),
     ["c.yaml", "cannot be read", "python/object/apply:os.getcwd"]),
    # -- inputs to the Trainer -----------------------------------------------------------------
    ("config built in code", None, lambda t: Trainer(torch.nn.Linear(4, 3), TrainingConfig(per_device_train_batch_size=-1)),
     ["per_device_train_batch_size=-1", "1 or more"]),
    ("no train_dataset", None, lambda t: Trainer(torch.nn.Linear(4, 3), TrainingConfig(output_dir=str(t / "o"))).train(),
     ["train_dataset", "Trainer(..., train_dataset=...)"]),
    ("empty dataset", None, lambda t: trainer(t, train=data(0)).train(), ["train_dataset is empty", "0 samples"]),
    ("batch larger than data, drop_last", None,
     lambda t: trainer(t, train=data(3), per_device_train_batch_size=4, dataloader_drop_last=True).train(),
     ["3 samples", "per_device_train_batch_size=4", "smaller batch size"]),
    ("eval_strategy without eval set", None, lambda t: trainer(t, eval_strategy="steps").train(),
     ["eval_strategy='steps'", "no eval_dataset", "--eval_strategy no"]),
    ("evaluate without eval set", None, lambda t: trainer(t).evaluate(), ["eval_dataset", "evaluate(dataset)"]),
    ("labels above the class range", None, lambda t: trainer(t, train=data(classes=3, low=2)).train(),
     ["to 4, but the model outputs 3 classes", "must be in 0..2", "Map the labels", "num_labels) = 5"]),
    ("negative labels", None, lambda t: trainer(t, train=data(classes=2, low=-2)).train(), ["labels from -2", "0..2"]),
    ("float token ids", None, lambda t: trainer(t, EmbeddingModel(), TokenIds(torch.float32), loss_fn=None).train(),
     ["'input_ids' is float32 of shape [4, 5]", "torch.long"]),
    ("no loss and no loss_fn", None, lambda t: trainer(t, loss_fn=None).train(),
     ["returned Tensor, which carries no loss", "loss_fn="]),
    ("loss_fn but no labels", None, lambda t: trainer(t, train=TensorDataset(torch.randn(8, 4))).train(),
     ["loss_fn was given but the batch has no labels", "(inputs, labels)"]),
    ("checkpoint of another model", None, from_other_model,
     ["checkpoint-2 does not fit this run", "size mismatch for 0.weight", "start afresh"]),
    ("resume path that does not exist", None, lambda t: trainer(t).train(resume_from_checkpoint=str(t / "gone")),
     ["resume_from_checkpoint=", "gone", "no such folder", "'latest'"]),
    ("resume latest with no checkpoint", None, lambda t: trainer(t).train(resume_from_checkpoint="latest"),
     ["resume_from_checkpoint='latest'", "holds no complete checkpoint", "start afresh"]),
]


@pytest.mark.slow  # 11 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("host, bad_input, words", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_gives_one_clear_error(tmp_path, fake_host, capsys, host, bad_input, words):
    if host is not None:
        fake_host(**host)
    with pytest.raises(Exception) as caught:
        bad_input(tmp_path)
    error = caught.value
    message = str(error)
    assert is_user_error(error), f"{type(error).__name__} raised from deep inside a library: {message}"
    for word in words:
        assert word in message, f"{word!r} not in: {message}"
    again = tmp_path / "again"
    again.mkdir()
    with pytest.raises(SystemExit) as exited:  # what the examples and user scripts print for it
        run_main(lambda argv: bad_input(again), [])
    assert exited.value.code in (1, 2)
    assert "Traceback" not in capsys.readouterr().err


def test_at_least_forty_bad_inputs_are_tried():
    assert len(CASES) >= 40


def test_the_reliability_page_counts_the_rows_of_this_table():
    """docs/reliability.md said 57 rows (61 bad inputs in all) where the table held 56."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "reliability.md").read_text(encoding="utf-8")
    total, rows, more = (int(n) for n in re.search(
        r"\| bad inputs tried \| \*\*(\d+)\*\* \| (\d+) rows of the table in `tests/test_bad_input.py` \+ (\d+) given",
        page).groups())
    assert (rows, total) == (len(CASES), len(CASES) + more)


def test_run_main_keeps_the_traceback_of_an_error_from_deep_inside_torch(capsys):
    def deep(argv):  # a bug in the user's model, which only the traceback locates
        torch.nn.functional.cross_entropy(torch.randn(2, 3), torch.tensor([0, 7]))

    with pytest.raises(IndexError):
        run_main(deep, [])
    with pytest.raises(ValueError):  # --debug re-raises braeburn's own errors too
        run_main(lambda argv: cli(*argv), ["--warmup_ratio", "2", "--debug"])


# -- the command line: real processes -----------------------------------------------------------
def run(command: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "BRAEBURN_DEBUG"} | env
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=environment)


def example(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return run([sys.executable, str(IMAGE_EXAMPLE), "--output_dir", str(tmp_path / "out"), "--cpu", *args], tmp_path,
               **env)


@pytest.mark.slow  # runs the image example as a subprocess twice (22 s on a loaded machine)
def test_example_missing_data_dir_one_line_and_a_traceback_with_debug(tmp_path):
    plain = example(tmp_path, "--data_dir", str(tmp_path / "photos"))
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    assert plain.stderr.startswith(f"error: --data_dir '{tmp_path / 'photos'}' does not exist (working directory "
                                   f"{tmp_path}). Pass a folder")
    debug = example(tmp_path, "--data_dir", str(tmp_path / "photos"), "--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "FileNotFoundError: --data_dir" in debug.stderr


@pytest.mark.slow  # runs the image example as a subprocess several times (69 s on a loaded machine)
def test_example_bad_resume_path_and_bad_options(tmp_path):
    resume = example(tmp_path, "--max_steps", "1", "--resume_from_checkpoint", str(tmp_path / "gone"))
    assert resume.returncode == 1 and "Traceback" not in resume.stderr
    assert f"error: resume_from_checkpoint='{tmp_path / 'gone'}': no such folder" in resume.stderr
    options = example(tmp_path, "--per_device_train_batch_size", "-1", "--learning_rat", "3", "--config",
                      config_file(tmp_path, "c.yaml", "warmup_ratio: 2\n"))
    assert options.returncode == 2 and "Traceback" not in options.stderr
    assert "3 problems" in options.stderr and "did you mean --learning_rate" in options.stderr
    assert "per_device_train_batch_size=-1" in options.stderr and "warmup_ratio=2" in options.stderr


def test_braeburn_cli_error_is_one_line_and_debug_shows_the_traceback(tmp_path):
    braeburn = [sys.executable, "-m", "braeburn.cli.main"]
    plain = run([*braeburn, "launch", "missing.py"], tmp_path)
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    assert "script 'missing.py' was not found" in plain.stderr and "pass -m to run a module" in plain.stderr
    for debug in (run([*braeburn, "--debug", "launch", "missing.py"], tmp_path),
                  run([*braeburn, "launch", "missing.py"], tmp_path, BRAEBURN_DEBUG="1")):
        assert debug.returncode == 1 and "Traceback" in debug.stderr and "FileNotFoundError" in debug.stderr
