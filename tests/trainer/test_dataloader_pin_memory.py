"""dataloader_pin_memory (Transformers' flag, common in run_glue scripts): false never pins, true pins where the
device gains from it. The device's fact is faked, so the CPU stands in for one that pins."""

from __future__ import annotations

import pytest
import torch

import braeburn


@pytest.mark.parametrize("flag", [True, False])
def test_dataloader_pin_memory_reaches_the_prepared_loader(flag, tmp_path, cpu_only, monkeypatch, one_thread):
    args = braeburn.TrainingArguments(output_dir=str(tmp_path), dataloader_pin_memory=flag, report_to="none")
    trainer = braeburn.Trainer(model=torch.nn.Linear(2, 1), args=args)
    monkeypatch.setattr(type(trainer.accelerator.plan.device), "pin_memory_helps", True)
    data = torch.utils.data.TensorDataset(torch.randn(4, 2), torch.randn(4, 1))
    loader = trainer.accelerator.prepare(torch.utils.data.DataLoader(data, batch_size=2))
    assert loader.non_blocking is flag


def test_dataloader_pin_memory_false_is_parsed_from_the_command_line(tmp_path):
    (args,) = braeburn.HfArgumentParser(braeburn.TrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--dataloader_pin_memory", "false"])
    assert args.dataloader_pin_memory is False and not args.validate()
