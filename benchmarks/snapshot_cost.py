"""What a background checkpoint costs the training thread: the snapshot of the state at the save step.

GPT-2 small (a 32,768-token vocabulary) with its AdamW state, about 1.3 GB, on the machine's default device (the
CPU with --cpu). Each round takes the snapshot two ways, alternating: ``copy`` (braeburn's: every tensor copied to
host memory, the serialising left to the writer thread) and ``serialise`` (every file serialised into memory on the
training thread, as braeburn did before), then writes it to disk as the writer thread would. Prints the median and
range of the time on the training thread and of the write.

    python benchmarks/snapshot_cost.py --cpu --rounds 4
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from braeburn import Accelerator  # noqa: E402
from braeburn.checkpoints import state as state_io  # noqa: E402
from braeburn.trainer.background_save import Snapshot, _Replay  # noqa: E402


class _Serialised(Snapshot):
    """The earlier snapshot: every file serialised into bytes on the training thread."""

    def __init__(self, accelerator):
        with state_io.capture_writes() as files:
            accelerator._write_state(Path("."))
        self.files = {name: state_io.DeferredWrite(lambda path, data=data: Path(path).write_bytes(data), len(data))
                      for name, data in files.items()}
        self.finish = accelerator._finish_save


def _accelerator(cpu: bool, layers: int) -> Accelerator:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=32768, n_positions=1024, n_layer=layers))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    accelerator = Accelerator(cpu=cpu)
    model, optimizer = accelerator.prepare(model, optimizer)
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)
    optimizer.step()  # AdamW's state exists, as at any save after the first step
    return accelerator


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--layers", type=int, default=12, help="GPT-2 small has 12")
    args = parser.parse_args(argv)
    accelerator = _accelerator(args.cpu, args.layers)
    folder = Path(tempfile.mkdtemp(prefix="snapshot-cost-"))
    times: dict[str, dict[str, list[float]]] = {way: {"snapshot": [], "write": []} for way in ("copy", "serialise")}
    try:
        for round_index in range(args.rounds):
            for way, kind in (("copy", Snapshot), ("serialise", _Serialised)):
                started = time.perf_counter()
                snapshot = kind(accelerator)
                taken = time.perf_counter()
                _Replay(snapshot).save_state(str(folder / way))
                times[way]["snapshot"].append(taken - started)
                times[way]["write"].append(time.perf_counter() - taken)
                size = snapshot.size
                del snapshot
                shutil.rmtree(folder / way)
            print(f"round {round_index + 1}: " + ", ".join(f"{way} {t['snapshot'][-1]:.2f} s + write {t['write'][-1]:.2f} s"
                                                        for way, t in times.items()), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{size / 1e9:.2f} GB a checkpoint on {accelerator.device}; on the training thread, median (min-max):")
    for way, t in times.items():
        spread = lambda v: f"{statistics.median(v):.2f} s ({min(v):.2f}-{max(v):.2f})"  # noqa: E731
        print(f"  {way:9s} snapshot {spread(t['snapshot'])}, then the writer thread {spread(t['write'])}")
    return times


if __name__ == "__main__":
    main()
