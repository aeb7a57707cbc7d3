"""A checkpoint folder never runs code: a payload planted in every file and folder a checkpoint can hold.

The payload is a pickle whose ``__reduce__`` runs ``exec`` to create a marker file (it is live:
tests/checkpoints/test_security.py::test_the_payload_is_live_when_loaded_unsafely). Each case plants it, or a bad
manifest, into a genuine checkpoint written by the Trainer (whole weights, or sharded through
torch.distributed.checkpoint with strategy="fsdp" on one process), and loads it twice: through
``Accelerator.load_state(dir)`` and through the Trainer's ``--resume_from_checkpoint latest``. Nothing
may run, and the error must be braeburn's own, one paragraph naming the file. "rewritten" cases play an
attacker who also rewrites ``manifest.json`` so that sizes and checksums match.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.accelerator.core import Accelerator
from braeburn.errors import is_user_error
from braeburn.trainer.config import CoreTrainingConfig as TrainingConfig
from braeburn.trainer.loop import CoreTrainer as Trainer
from braeburn.trainer.checkpoint import write_manifest

pytestmark = pytest.mark.usefixtures("one_thread", "no_launcher_env")


class Payload:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def trainer(output_dir: Path, strategy: str, **options) -> Trainer:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    config = TrainingConfig(output_dir=str(output_dir), per_device_train_batch_size=4, use_cpu=True, strategy=strategy,
                            **{"max_steps": 2, "save_strategy": "steps", "save_steps": 2, "logging_steps": 1,
                               "overwrite_output_dir": True, **options})
    return Trainer(torch.nn.Linear(4, 2), config, train_dataset=data, loss_fn=torch.nn.functional.cross_entropy)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """One genuine checkpoint-2 of each layout, copied for every case."""
    root = tmp_path_factory.mktemp("pristine")
    for strategy in ("auto", "fsdp"):
        trainer(root / strategy, strategy).train()
    return root


def rewrite_manifest(folder: Path, layout: str | None = None) -> None:
    write_manifest(folder, 2)
    if layout:
        path = folder / "manifest.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "layout": layout}))


def pickle_payload(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"weight": torch.zeros(2), "extra": Payload(marker)}, path)


def raw_pickle(path: Path, marker: Path) -> None:  # what torch's DCP would pickle.load
    import pickle

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(Payload(marker)))


WHOLE_FILES = ["accelerator.pt", "optimizer_0.pt", "scheduler_0.pt", "dataloader_0.pt", "rng_state_0.pt"]


def old_layout_payload(folder: Path, marker: Path) -> None:
    """A checkpoint of the earlier layout, whose weights were torch.save's model_0.pt, with the payload there."""
    (folder / "model.safetensors").unlink()
    pickle_payload(folder / "model_0.pt", marker)
    rewrite_manifest(folder)


def _cases():
    """(id, layout, plant(folder, marker), expected message): every file and folder a checkpoint can hold."""
    cases = []
    for name in WHOLE_FILES:
        cases.append((f"{name} swapped", "auto", lambda f, m, n=name: pickle_payload(f / n, m),
                      rf"{name} is (truncated or altered|corrupted)"))
        cases.append((f"{name} swapped, manifest rewritten", "auto",
                      lambda f, m, n=name: (pickle_payload(f / n, m), rewrite_manifest(f)),
                      rf"{name} holds pickled objects other than tensors"))
    cases += [
        ("model.safetensors swapped", "auto", lambda f, m: pickle_payload(f / "model.safetensors", m),
         r"model.safetensors is (truncated or altered|corrupted)"),
        ("model.safetensors swapped, manifest rewritten", "auto",
         lambda f, m: (pickle_payload(f / "model.safetensors", m), rewrite_manifest(f)),
         r"model.safetensors is not a safetensors file that braeburn can read"),
        ("model_0.pt of the old layout, manifest rewritten", "auto", old_layout_payload,
         r"model_0.pt holds pickled objects other than tensors"),
        ("gradients_0.pt added", "auto", lambda f, m: pickle_payload(f / "gradients_0.pt", m),
         r"gradients_0.pt is not listed in .*manifest.json"),
        ("gradients_0.pt added, manifest rewritten", "auto",
         lambda f, m: (pickle_payload(f / "gradients_0.pt", m), rewrite_manifest(f)),
         r"gradients_0.pt holds pickled objects"),
        ("an unlisted file", "auto", lambda f, m: pickle_payload(f / "notes.pt", m), r"notes.pt is not listed"),
        ("an unlisted folder", "auto", lambda f, m: pickle_payload(f / "extra" / "deep.pt", m),
         r"extra/deep.pt is not listed"),
        ("sharded/.metadata added", "auto", lambda f, m: raw_pickle(f / "sharded" / ".metadata", m),
         r"sharded/.metadata is not listed"),
        ("sharded/.metadata added, manifest rewritten", "auto",
         lambda f, m: (raw_pickle(f / "sharded" / ".metadata", m), rewrite_manifest(f, "sharded")),
         r"\.metadata is not torch checkpoint metadata .*builtins.exec"),
        ("sharded/.metadata swapped, manifest rewritten", "fsdp",
         lambda f, m: (raw_pickle(f / "sharded" / ".metadata", m), rewrite_manifest(f)),
         r"\.metadata is not torch checkpoint metadata .*builtins.exec"),
        ("sharded/__0_0.distcp swapped, manifest rewritten", "fsdp",
         lambda f, m: (pickle_payload(f / "sharded" / "__0_0.distcp", m), rewrite_manifest(f)),
         r"(holds pickled objects other than plain data|cannot be read as torch checkpoint data)"),
        ("trainer_state.json with wrong types, manifest rewritten", "auto",
         lambda f, m: ((f / "trainer_state.json").write_text(json.dumps({"global_step": "2", "epoch": [0]})),
                       rewrite_manifest(f)),
         r"trainer_state.json gives global_step=\"2\", but it must be a whole number"),
        ("trainer_state.json a pickle, manifest rewritten", "auto",
         lambda f, m: (raw_pickle(f / "trainer_state.json", m), rewrite_manifest(f)),
         r"trainer_state.json cannot be read"),
        ("manifest.json a pickle", "auto", lambda f, m: raw_pickle(f / "manifest.json", m),
         r"manifest.json (is missing or unreadable|cannot be read)"),
        ("manifest lists no files", "auto",
         lambda f, m: (f / "manifest.json").write_text(json.dumps({"format": 1, "step": 2, "files": {}})),
         r"lists no files"),
        ("manifest names a file outside", "auto",
         lambda f, m: _add_entry(f, "../../outside.pt"), r"'../../outside.pt', a name that leaves the checkpoint"),
        ("manifest names an absolute path", "auto",
         lambda f, m: _add_entry(f, "/etc/hostname"), r"'/etc/hostname', a name that leaves the checkpoint"),
    ]
    return cases


def _add_entry(folder: Path, name: str) -> None:
    path = folder / "manifest.json"
    data = json.loads(path.read_text())
    data["files"][name] = {"size": 1, "sha256": "0" * 64}
    path.write_text(json.dumps(data))


CASES = _cases()


@pytest.mark.slow  # 5 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_the_reliability_page_counts_these_planted_cases():
    """docs/reliability.md counted 25 planted files and manifests (35 payloads in all) where this table held 27."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "reliability.md").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| payloads refused |"))
    _, _, total, details, _ = row.split("|")
    parts = [int(n) for n in re.findall(r"(?:^|, |; |and )(\d+) ", details.strip())]  # 4 files, 1 Trainer ...
    assert int(re.search(r"(\d+) planted checkpoint files and manifests", row).group(1)) == len(CASES)
    assert int(total.strip().strip("*")) == sum(parts) and len(parts) == 6, (total, parts)
    assert f"`tests/checkpoints/test_checkpoint_payloads.py::test_a_planted_payload_never_runs_and_is_refused_clearly` " \
           f"({len(CASES)} cases)" in page


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_planted_payload_never_runs_and_is_refused_clearly(tmp_path, pristine, case):
    name, strategy, plant, expected = case
    out, marker = tmp_path / "out", tmp_path / "pwned"
    shutil.copytree(pristine / strategy, out)
    plant(out / "checkpoint-2", marker)
    errors = []
    if "trainer_state" not in name:  # the Accelerator alone never reads trainer_state.json
        accelerator = Accelerator(cpu=True, strategy=strategy)
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.AdamW(model.parameters())
        loader = torch.utils.data.DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        accelerator.prepare(model, optimizer, loader, scheduler)
        with pytest.raises(Exception) as error:
            accelerator.load_state(out / "checkpoint-2")
        errors.append(error.value)
    with pytest.raises(Exception) as error:
        trainer(out, strategy, max_steps=4).train(resume_from_checkpoint="latest")
    errors.append(error.value)
    for error in errors:
        assert not marker.exists(), f"the payload ran ({type(error).__name__}: {error})"
        assert is_user_error(error), (type(error), error)  # braeburn's own error, printed without a traceback
        assert __import__("re").search(expected, str(error)), str(error)
    assert not marker.exists()


def test_a_hostile_value_inside_a_genuine_sharded_checkpoint_is_not_unpickled(tmp_path):
    """DCP itself loads non-tensor values with weights_only=False; braeburn's planner does not."""
    marker = tmp_path / "pwned"

    def setup():
        accelerator = Accelerator(cpu=True, strategy="fsdp")
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.AdamW(model.parameters())
        model, optimizer = accelerator.prepare(model, optimizer)
        return accelerator, optimizer

    accelerator, optimizer = setup()
    optimizer.param_groups[0]["note"] = Payload(marker)  # written by DCP as a pickled value, manifest and all
    accelerator.save_state(tmp_path / "state")
    fresh, optimizer = setup()
    optimizer.param_groups[0]["note"] = None  # so that DCP reads that value back
    with pytest.raises(Exception) as error:
        fresh.load_state(tmp_path / "state")
    assert "value 'optimizer_0.param_groups.0.note' holds pickled objects other than plain data" in str(error.value)
    assert is_user_error(error.value) and not marker.exists()
