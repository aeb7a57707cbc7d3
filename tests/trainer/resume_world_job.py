"""A run stopped on N processes and resumed on M, for tests/trainer/test_no_harm_resume.py:

    python tests/trainer/resume_world_job.py OUT stop      # train, stop and save at step 4
    python tests/trainer/resume_world_job.py OUT resume    # resume OUT's latest checkpoint and train to the end

run alone (1 process) or by `braeburn launch --cpu --num-processes 2`. 48 samples in batches of 4 per
process, 2 epochs. Rank 0 of a resume writes OUT/resumed.pt: the steps it trained and where it ended.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from braeburn import Trainer, TrainingConfig
from braeburn.trainer import Callback


class StopAt4(Callback):
    def on_step_end(self, trainer, state):
        if state.global_step == 4:
            state.request_stop("test stop", save=True)


class CountSteps(Callback):
    def __init__(self):
        self.steps = 0

    def on_step_end(self, trainer, state):
        self.steps += 1


def main(out: Path, mode: str) -> None:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(48, 8, generator=generator), torch.randint(0, 3, (48,), generator=generator))
    torch.manual_seed(0)
    counted = CountSteps()
    config = TrainingConfig(output_dir=str(out / "run"), per_device_train_batch_size=4, num_train_epochs=2,
                            save_strategy="no", mixed_precision="no", compile="false", disable_tqdm=True)
    trainer = Trainer(torch.nn.Linear(8, 3), config, train_dataset=data, loss_fn=torch.nn.functional.cross_entropy,
                      callbacks=[StopAt4() if mode == "stop" else counted])
    trainer.train(resume_from_checkpoint="latest" if mode == "resume" else None)
    if mode == "resume" and trainer.is_main_process:
        torch.save({"trained": counted.steps, "step": trainer.state.global_step, "max_steps": trainer.state.max_steps},
                   out / "resumed.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
