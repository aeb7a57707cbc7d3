"""braeburn.Trainer's checkpoint folders carry what a Transformers user's tools read from a Transformers checkpoint
(training_args.bin, trainer_state.json, model.safetensors, config.json), and differ from Transformers' only in the
file names docs/migrating.md lists; a checkpoint written by transformers.Trainer resumes into another folder as
Transformers resumes it, and in its own output_dir is refused in one line that gives the way out."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import braeburn  # noqa: E402
import transformers  # noqa: E402
from braeburn.trainer.checkpoint import CheckpointError  # noqa: E402

from .test_same_seed import _losses, _reset_accelerate, peer_env  # noqa: E402,F401  (peer_env: the fixture)
from .test_same_seed import _trainer as _same_seed_trainer  # noqa: E402

MIGRATING = Path(__file__).resolve().parents[3] / "docs" / "migrating.md"


class Tokens(torch.utils.data.Dataset):
    def __init__(self, count: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(5, 30, (count, 8), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": torch.tensor(index % 2)}


def _bert() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=2)
    return transformers.BertForSequenceClassification(config)


def _train(lib: ModuleType, out: Path) -> None:
    _reset_accelerate()
    args = lib.TrainingArguments(output_dir=str(out), per_device_train_batch_size=4, num_train_epochs=1, seed=3,
                                 save_strategy="steps", save_steps=2, logging_steps=1, report_to="none",
                                 disable_tqdm=True)
    lib.Trainer(model=_bert(), args=args, train_dataset=Tokens(16)).train()


def _documented_differences() -> tuple[set[str], set[str]]:
    """The names docs/migrating.md's line on checkpoint folders gives: Transformers' own, then braeburn's own."""
    page = MIGRATING.read_text()
    start = page.index("- **Checkpoint folders**")
    bullet = " ".join(page[start:page.index("\n- ", start)].split())
    theirs, ours = bullet.split(" braeburn writes ", 1)
    return set(re.findall(r"`([\w.]+)`", theirs)), set(re.findall(r"`([\w.]+)`", ours.split(";")[0]))


def test_checkpoints_carry_what_transformers_tools_read(peer_env, tmp_path):
    _train(transformers, tmp_path / "peer")
    _train(braeburn, tmp_path / "ours")
    theirs = {p.name for p in (tmp_path / "peer" / "checkpoint-2").iterdir()}
    folder = tmp_path / "ours" / "checkpoint-2"
    ours = {p.name for p in folder.iterdir()}
    assert {"training_args.bin", "trainer_state.json", "model.safetensors", "config.json"} <= theirs & ours
    assert (theirs - ours, ours - theirs) == _documented_differences()
    args = torch.load(folder / "training_args.bin", weights_only=False)  # as a Transformers user's tools read it
    assert (args.output_dir, args.seed, args.save_steps) == (str(tmp_path / "ours"), 3, 2)
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and [r["step"] for r in state["log_history"]] == [1, 2]
    assert {"best_model_checkpoint", "num_train_epochs", "train_batch_size"} <= set(state)
    from safetensors.torch import load_file

    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(folder).state_dict()
    assert all(torch.equal(loaded[name], tensor) for name, tensor in load_file(folder / "model.safetensors").items())


@pytest.mark.parametrize("request_", ["path", "latest"])
def test_resuming_a_transformers_checkpoint_in_its_own_output_dir_is_refused_in_one_line(peer_env, tmp_path, request_):
    """run_glue's way: the same --output_dir, and --resume_from_checkpoint with a folder in it (or True), where
    braeburn's checkpoints would take Transformers' names: one line says to resume it into another folder."""
    out = tmp_path / "run"
    _train(transformers, out)
    _reset_accelerate()
    args = braeburn.TrainingArguments(output_dir=str(out), per_device_train_batch_size=4, num_train_epochs=1,
                                      save_strategy="steps", save_steps=2, report_to="none", disable_tqdm=True)
    trainer = braeburn.Trainer(model=_bert(), args=args, train_dataset=Tokens(16))
    with pytest.raises(CheckpointError) as error:
        trainer.train(resume_from_checkpoint=str(out / "checkpoint-4") if request_ == "path" else True)
    message = str(error.value)
    assert message.startswith(f"{out / 'checkpoint-4'} is a checkpoint of Transformers' Trainer"), message
    assert "\n" not in message and "--output_dir <a new folder> --resume_from_checkpoint" in message
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2", "checkpoint-4"]  # nothing written


def test_arguments_that_cannot_be_pickled_leave_only_training_args_bin_out(peer_env, tmp_path, capsys):
    _reset_accelerate()
    args = braeburn.TrainingArguments(output_dir=str(tmp_path / "run"), per_device_train_batch_size=4,
                                      num_train_epochs=1, save_strategy="steps", save_steps=2, report_to="none",
                                      disable_tqdm=True)
    args.on_the_side = lambda: None  # a value a script set on the arguments
    braeburn.Trainer(model=_bert(), args=args, train_dataset=Tokens(8)).train()
    names = {p.name for p in (tmp_path / "run" / "checkpoint-2").iterdir()}
    assert "training_args.bin" not in names and {"model.safetensors", "trainer_state.json"} <= names
    assert "checkpoints hold no training_args.bin" in capsys.readouterr().err


@pytest.mark.slow  # 4 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("step", [3, 5], ids=["mid-epoch", "epoch-end"])
def test_a_transformers_checkpoint_resumes_into_another_folder_as_transformers_resumes_it(peer_env, tmp_path, step):
    """Transformers' run of a dropout model (shuffled, accumulation 2, evaluated each epoch), checkpointed at every
    step; its checkpoint-3 (inside epoch 1) or checkpoint-5 (its last step, before the epoch's evaluation) resumed by
    transformers.Trainer and by braeburn.Trainer, each into a folder of its own: the same losses after it."""
    _same_seed_trainer(transformers, tmp_path / "peer", save_strategy="steps", save_steps=1).train()
    checkpoint = str(tmp_path / "peer" / f"checkpoint-{step}")
    runs = {}
    for name, lib in (("transformers", transformers), ("braeburn", braeburn)):
        trainer = _same_seed_trainer(lib, tmp_path / name, save_strategy="epoch")
        trainer.train(resume_from_checkpoint=checkpoint)
        runs[name] = ([(s, loss) for s, loss in _losses(trainer) if s > step], _losses(trainer, "eval_loss")[-1:])
        assert trainer.state.global_step == 10 and (tmp_path / name / "checkpoint-10").is_dir()
    assert runs["braeburn"] == runs["transformers"] and len(runs["braeburn"][0]) == 10 - step


class _Payload:
    """Unpickled, it would create ``marker``: the proof that a load ran code from the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _state_with(**values):
    def plant(folder: Path) -> None:
        state = json.loads((folder / "trainer_state.json").read_text())
        (folder / "trainer_state.json").write_text(json.dumps({**state, **values}))
    return plant


def _hostile_checkpoints(marker: Path) -> dict[str, tuple[str, object]]:
    """Each change to a genuine Transformers checkpoint, and the file its one line names."""
    def saved(name: str, value: object):
        return lambda folder: torch.save(value, folder / name)
    return {"code in optimizer.pt": ("optimizer.pt", saved("optimizer.pt", {"state": _Payload(marker)})),
            "code in rng_state.pth": ("rng_state.pth", saved("rng_state.pth", {"python": _Payload(marker)})),
            "code in scheduler.pt": ("scheduler.pt", saved("scheduler.pt", _Payload(marker))),
            "optimizer.pt of another shape": ("optimizer.pt", saved("optimizer.pt", {"state": {}, "param_groups": "x"})),
            "scheduler.pt of another shape": ("scheduler.pt", saved("scheduler.pt", {"last_epoch": 1})),
            "rng_state.pth without numpy's state": ("rng_state.pth", saved("rng_state.pth", {"python": 1, "cpu": 2})),
            "a negative global_step": ("trainer_state.json", _state_with(global_step=-5)),
            "a boolean global_step": ("trainer_state.json", _state_with(global_step=True)),
            "a NaN epoch": ("trainer_state.json", _state_with(epoch=float("nan"))),
            "log_history of numbers": ("trainer_state.json", _state_with(log_history=[1, 2])),
            "a text best_metric": ("trainer_state.json", _state_with(best_metric="high"))}


def test_a_hostile_transformers_checkpoint_runs_no_code_and_is_refused_in_one_line(peer_env, tmp_path):
    """A Transformers checkpoint whose files were planted or garbled: nothing in it runs, and the resume stops in one
    CheckpointError naming the file (not a KeyError or TypeError from inside the load, nor a run resumed at a
    negative step)."""
    import shutil

    _train(transformers, tmp_path / "peer")
    genuine, marker = tmp_path / "peer" / "checkpoint-2", tmp_path / "ran"
    for index, (what, (name, plant)) in enumerate(_hostile_checkpoints(marker).items()):
        folder = tmp_path / f"hostile-{index}"
        shutil.copytree(genuine, folder)
        plant(folder)
        _reset_accelerate()
        args = braeburn.TrainingArguments(output_dir=str(tmp_path / f"out-{index}"), per_device_train_batch_size=4,
                                          num_train_epochs=1, seed=3, report_to="none", disable_tqdm=True)
        trainer = braeburn.Trainer(model=_bert(), args=args, train_dataset=Tokens(16))
        with pytest.raises(CheckpointError, match=f"whose {re.escape(name)} cannot be read") as refused:
            trainer.train(resume_from_checkpoint=str(folder))
        assert "\n" not in str(refused.value), what
        assert not marker.exists(), what
