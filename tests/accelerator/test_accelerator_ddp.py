"""A real 2-process gloo run (torchrun on CPU): the same result as one process with the same global
batch, gather_for_metrics without the padded duplicates, and save/load of state under DDP."""

from __future__ import annotations

import os
import runpy
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = pytest.mark.slow  # one torchrun with 2 gloo processes (~20 s on 2 cores)

SCRIPT = textwrap.dedent('''
    import sys

    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    from braeburn import Accelerator


    def data(n, seed=0):
        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(n, 5, generator=generator)
        return TensorDataset(x, x @ torch.arange(1.0, 6.0) + 0.3, torch.arange(n))


    def train(batch_size, out, state_dir=None):
        accelerator = Accelerator(cpu=True, seed=0, gradient_accumulation_steps=2)
        model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        loader = DataLoader(data(64), batch_size=batch_size, shuffle=True)
        evaluation = DataLoader(data(11, seed=1), batch_size=2)  # uneven: 11 samples over the processes
        model, optimizer, loader, evaluation = accelerator.prepare(model, optimizer, loader, evaluation)
        losses = []
        for epoch in range(3):
            for x, y, _ in loader:
                with accelerator.accumulate(model):
                    loss = nn.functional.mse_loss(model(x).squeeze(1), y)
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
                losses.append(accelerator.reduce(loss.detach(), "mean").item())
            if epoch == 0 and state_dir:
                accelerator.save_state(state_dir)
        seen, predictions = [], []
        with torch.no_grad():
            for x, _, index in evaluation:
                seen.append(accelerator.gather_for_metrics(index))
                predictions.append(accelerator.gather_for_metrics(model(x).squeeze(1)))
        result = {"params": [p.detach().clone() for p in accelerator.unwrap_model(model).parameters()],
                  "eval_indices": torch.cat(seen), "predictions": torch.cat(predictions),
                  "losses": torch.tensor(losses), "processes": accelerator.num_processes,
                  "gathered_ranks": accelerator.gather(torch.tensor([accelerator.process_index]))}
        if state_dir:  # a fresh object on every rank loads the epoch-0 state and replays epochs 1 and 2
            again = Accelerator(cpu=True, gradient_accumulation_steps=2)
            model2 = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
            optimizer2 = torch.optim.SGD(model2.parameters(), lr=0.05)
            loader2 = DataLoader(data(64), batch_size=batch_size, shuffle=True)
            model2, optimizer2, loader2, _ = again.prepare(model2, optimizer2, loader2,
                                                           DataLoader(data(11, seed=1), batch_size=2))
            again.load_state(state_dir)
            for epoch in range(1, 3):
                for x, y, _ in loader2:
                    with again.accumulate(model2):
                        again.backward(nn.functional.mse_loss(model2(x).squeeze(1), y))
                        optimizer2.step()
                        optimizer2.zero_grad()
            result["resumed_params"] = [p.detach().clone() for p in again.unwrap_model(model2).parameters()]
        if accelerator.is_main_process:
            torch.save(result, out)
        accelerator.wait_for_everyone()
        accelerator.end_training()


    if __name__ == "__main__":
        train(int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
''')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ddp")
    script = directory / "train_ddp.py"
    script.write_text(SCRIPT)
    env = {key: value for key, value in os.environ.items() if not key.startswith("BRAEBURN_")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(_free_port()), str(script), "4", str(directory / "two.pt"), str(directory / "state")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        assert name not in os.environ
    runpy.run_path(str(script), run_name="single")["train"](8, str(directory / "one.pt"))
    load = lambda name: torch.load(directory / name, weights_only=True)  # noqa: E731
    return load("two.pt"), load("one.pt")


def test_two_processes_match_one_with_the_same_global_batch(runs):
    two, one = runs
    assert two["processes"] == 2 and one["processes"] == 1
    assert two["gathered_ranks"].tolist() == [0, 1]
    for a, b in zip(two["params"], one["params"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(two["losses"], one["losses"], rtol=1e-5, atol=1e-6)
    assert two["losses"][-1] < two["losses"][0] * 0.5


def test_gather_for_metrics_drops_padded_duplicates(runs):
    two, one = runs
    assert two["eval_indices"].tolist() == list(range(11))
    torch.testing.assert_close(two["predictions"], one["predictions"], rtol=1e-5, atol=1e-6)


def test_state_saved_under_ddp_resumes_to_the_same_weights(runs):
    two, _ = runs
    for a, b in zip(two["params"], two["resumed_params"]):
        assert torch.equal(a, b)
