"""A run folder written by a braeburn from before its record of files (``.braeburn-files.json``) resumes on this
one: what braeburn's own manifests and metrics log prove is recorded as braeburn's, nothing else, and a folder with
entries braeburn cannot prove at names the run writes is refused in one error naming every one.

run_before_the_record/ is such a folder, written by the tree of that time (braeburn.Trainer, Linear(4, 2), 32 samples
of torch.manual_seed(0), batch 8, max_steps=4, save_steps=2): checkpoint-4 and metrics.jsonl.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

import braeburn
from braeburn.checkpoints import ownership

EARLIER = Path(__file__).resolve().parent / "run_before_the_record"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64  # where that run drew its curves; braeburn cannot prove it wrote it


def _earlier_run(tmp_path: Path) -> Path:
    out = shutil.copytree(EARLIER, tmp_path / "run")
    (out / "training_curves.png").write_bytes(PNG)
    return out


def _trainer(out: Path, **overrides) -> braeburn.Trainer:
    torch.manual_seed(0)
    x = torch.randn(32, 4)
    args = braeburn.TrainingArguments(**{"output_dir": str(out), "max_steps": 8, "per_device_train_batch_size": 8,
                                         "save_steps": 2, "use_cpu": True, "disable_tqdm": True, "logging_steps": 1,
                                         "report_to": "none", **overrides})
    return braeburn.Trainer(torch.nn.Linear(4, 2), args, train_dataset=TensorDataset(x, (x.sum(1) > 0).long()),
                            loss_fn=torch.nn.functional.cross_entropy)


def test_a_run_from_before_the_record_resumes_and_its_proven_files_are_recorded(tmp_path, capsys):
    out = _earlier_run(tmp_path)
    logged = (out / "metrics.jsonl").read_text()
    trainer = _trainer(out)
    assert trainer.train(resume_from_checkpoint=True).global_step == 8
    assert (out / "metrics.jsonl").read_text().startswith(logged)  # appended to, as any resume does
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps[:4] == [1, 2, 3, 4] and steps[-1] == 8
    assert ownership.recorded(out) == {"checkpoint-4": "folder", "checkpoint-8": "folder", "metrics.jsonl": "file",
                                       **({"checkpoint-6": "folder"} if (out / "checkpoint-6").exists() else {})}
    assert (out / "training_curves.png").read_bytes() == PNG  # not proven: left as it was, not redrawn
    printed = capsys.readouterr().out
    assert "holds a run of a braeburn from before its record" in printed
    assert f"no training_curves.png this run: {out / 'training_curves.png'} is there" in printed


def test_entries_braeburn_cannot_prove_are_all_named_in_one_refusal(tmp_path):
    """Beside the earlier run, files at the names the final model takes (a save_model() of that time into
    output_dir, or the user's): braeburn proves none of them, so the resume names all of them at once."""
    out = _earlier_run(tmp_path)
    for name in ("model.safetensors", "training_args.bin"):
        (out / name).write_bytes(b"not proven")
    with pytest.raises(ownership.ForeignFileError) as refused:
        _trainer(out).train(resume_from_checkpoint=True)
    message = str(refused.value)
    assert message.startswith(f"2 entries of {out} are not braeburn's") and "\n" not in message
    assert "model.safetensors (" in message and "training_args.bin (" in message
    assert f"move model.safetensors, training_args.bin out of {out}" in message
    assert (out / "model.safetensors").read_bytes() == b"not proven"
    assert not (out / ownership.MARKER).exists()  # refused: nothing written, not even the record


@pytest.mark.parametrize("change", ["another log", "a changed record", "a checkpoint file altered"])
def test_a_folder_braeburn_cannot_prove_is_not_adopted(tmp_path, change):
    out = _earlier_run(tmp_path)
    log = out / "metrics.jsonl"
    if change == "another log":
        log.write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n")
    elif change == "a changed record":
        records = [json.loads(line) for line in log.read_text().splitlines()]
        records[1]["loss"] = 0.25
        log.write_text("".join(json.dumps(record) + "\n" for record in records))
    else:
        with open(out / "checkpoint-4" / "scheduler_0.pt", "ab") as handle:
            handle.write(b"\0")
    before = log.read_bytes()
    assert ownership.unrecorded_run(out) == {}
    with pytest.raises(ownership.ForeignFileError, match="metrics.jsonl"):
        _trainer(out).train(resume_from_checkpoint=True)
    assert log.read_bytes() == before and not (out / ownership.MARKER).exists()
