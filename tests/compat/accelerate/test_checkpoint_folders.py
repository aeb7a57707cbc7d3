"""What braeburn.Accelerator leaves in an Accelerate user's checkpoints folder: with automatic naming only the newest
checkpoint's lock file is there while the run lives (its older checkpoints are never written again), and none after."""

from __future__ import annotations

import torch

from braeburn import Accelerator, ProjectConfiguration


def test_automatic_naming_holds_only_the_newest_checkpoints_lock_and_leaves_none(tmp_path, no_launcher_env):
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, project_config=config)
    accelerator.prepare(torch.nn.Linear(2, 2))
    for _ in range(4):
        accelerator.save_state()
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == [".checkpoint_3.braeburn.lock", "checkpoint_2", "checkpoint_3"]
    accelerator.end_training()
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint_2", "checkpoint_3"]
