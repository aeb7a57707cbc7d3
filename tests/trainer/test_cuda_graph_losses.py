"""Under CUDA graphs (torch_compile_mode "reduce-overhead" or "max-autotune") a compiled model's outputs live in
the graph's memory pool and the next replay overwrites them. The Trainer keeps each step's loss until the next
log line, so there it keeps a copy; elsewhere it keeps the loss itself (no extra kernel a step). On an H200,
before the copy, `torch_compile_mode="reduce-overhead"` stopped every run with torch's "accessing tensor output
of CUDAGraphs that has been overwritten by a subsequent run" (benchmarks/results/h200-cudagraphs/). The run
on the GPU is tests/devices/test_gpu_lane.py::test_cuda_graphs_train_with_the_loss_kept_across_steps.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from braeburn.plan.compile_policy import outputs_are_overwritten
from braeburn.trainer.config import CoreTrainingConfig as TrainingConfig
from braeburn.trainer.loop import CoreTrainer as Trainer
from braeburn.trainer.callbacks import Callback


class OwnLoss(nn.Module):
    """Computes its loss itself, as a Transformers model does, and notes the loss tensor it returned (not when
    compiled: the growing list would recompile)."""

    def __init__(self, record: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(8, 3)
        self.record = record
        self.returned: list[torch.Tensor] = []

    def forward(self, x, labels):
        loss = nn.functional.cross_entropy(self.net(x), labels)
        if self.record:
            self.returned.append(loss)
        return {"loss": loss}


def own_loss_data(n: int = 32) -> list[dict]:
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(0))
    return [{"x": row, "labels": row[:3].argmax()} for row in x]


class LastKept(Callback):
    def __init__(self):
        self.shared: list[bool] = []

    def on_step_end(self, trainer, state, **kwargs):
        kept = trainer._window_losses[-1]
        self.shared.append(kept.data_ptr() == trainer.model.returned[-1].data_ptr())


@pytest.mark.parametrize("mode, copied", [(None, False), ("default", False), ("max-autotune-no-cudagraphs", False),
                                          ("reduce-overhead", True), ("max-autotune", True)])
def test_the_loss_kept_for_the_log_is_a_copy_exactly_under_cuda_graphs(tmp_path, mode, copied):
    assert outputs_are_overwritten(mode) is copied
    seen = LastKept()
    config = TrainingConfig(output_dir=str(tmp_path), use_cpu=True, compile="false", torch_compile_mode=mode,
                            max_steps=4, logging_steps=2, per_device_train_batch_size=8, save_strategy="no",
                            disable_tqdm=True)
    trainer = Trainer(OwnLoss(), config, train_dataset=own_loss_data(), callbacks=[seen])
    result = trainer.train()
    assert seen.shared == [not copied] * 4
    assert torch.isfinite(torch.tensor(result.training_loss))
