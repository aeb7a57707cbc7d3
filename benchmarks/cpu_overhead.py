"""Per-step overhead of braeburn's Trainer against a bare PyTorch loop, on a tiny MLP on the CPU.

    python benchmarks/cpu_overhead.py [--steps 300] [--rounds 3] [--clock cpu]

Accelerate and Lightning run beside them when they are installed (pip install accelerate lightning).

Both loops do the same math: a shuffled DataLoader (batch 16), forward, cross-entropy, backward,
gradient clipping at 1.0, AdamW (fused, as the Trainer picks on the CPU) and a linear schedule.
The Trainer runs with its progress output (plain lines, stdout to a file) and the metrics log on,
logging every 50 steps; checkpoints are off (a save is not a per-step cost).

The marginal step rate S / (t(2S) - t(S)) removes fixed costs (imports, setup, the summary), and
the median of the rounds (run alternately, so machine load hits both) is reported. Goal: ratio >= 0.9.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from braeburn.plan.envvars import MAX_STEPS_VAR, max_steps_cap
from braeburn import Trainer, TrainingConfig

BATCH = 16
clock = time.perf_counter  # --clock cpu: time.process_time, steadier on a machine shared with other jobs


def data(steps: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    n = BATCH * steps
    return TensorDataset(torch.randn(n, 32, generator=generator), torch.randint(0, 10, (n,), generator=generator))


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def bare(steps: int) -> float:
    net, dataset = model(), data(steps)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    started = clock()
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    return clock() - started


def braeburn(steps: int) -> float:
    net, dataset = model(), data(steps)
    with tempfile.TemporaryDirectory() as folder:
        config = TrainingConfig(output_dir=f"{folder}/out", per_device_train_batch_size=BATCH, learning_rate=1e-3,
                                num_train_epochs=1, logging_steps=50, save_strategy="no", use_cpu=True)
        sink = io.StringIO()  # not a terminal: plain progress lines, as in a batch job's log file
        with contextlib.redirect_stdout(sink):
            trainer = Trainer(net, config, train_dataset=dataset, loss_fn=torch.nn.functional.cross_entropy)
            started = clock()
            trainer.train()
            return clock() - started


def accelerate(steps: int) -> float:
    """Hugging Face Accelerate around the same loop (the user's loop, Accelerate's prepare/backward)."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    net, dataset = model(), data(steps)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    net, optimizer, loader, scheduler = accelerator.prepare(net, optimizer, loader, scheduler)
    started = clock()
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(net(x), y)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    return clock() - started


def lightning(steps: int) -> float:
    """Lightning's Trainer with its defaults (progress bar, logger), the same math in training_step."""
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model()

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3, fused=True)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, gradient_clip_val=1.0, default_root_dir=folder,
                            enable_checkpointing=False, log_every_n_steps=50, enable_model_summary=False)
        loader = DataLoader(data(steps), batch_size=BATCH, shuffle=True)
        started = clock()
        trainer.fit(Module(), loader)
        return clock() - started


def available(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def marginal_rate(run, steps: int) -> float:
    extra = run(2 * steps) - run(steps)
    return steps / extra if extra > 0 else float("nan")  # a clock too coarse for a very short run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time, or this process's CPU time (one torch thread), which other jobs disturb less")
    args = parser.parse_args()
    cap = max_steps_cap()  # BRAEBURN_MAX_STEPS: a quick check that the script runs (the doc tests), not a measurement
    if cap is not None:
        args.steps, args.rounds, warmup = max(1, cap // 2), 1, cap
        print(f"{MAX_STEPS_VAR}={cap}: {args.steps}/{2 * args.steps} steps, 1 round: the figures mean nothing")
    else:
        warmup = 120
    global clock
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(1)
    runners = {"bare PyTorch loop": bare, "braeburn Trainer": braeburn}
    if available("accelerate"):
        runners["Accelerate"] = accelerate
    if available("lightning"):
        runners["Lightning Trainer"] = lightning
    for run in runners.values():
        run(warmup)  # warm up: imports, kernels, and the end-of-run plot (matplotlib loads once)
    rates: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(args.rounds):  # alternating, so machine load hits every runner alike
        for name, run in runners.items():
            rates[name].append(marginal_rate(run, args.steps))
    bare_rate = statistics.median(rates["bare PyTorch loop"])
    print("| runner | steps/s (median) | rounds | vs bare loop |\n|---|---|---|---|")
    for name, values in rates.items():
        rate = statistics.median(values)
        print(f"| {name} | {rate:.1f} | {', '.join(f'{r:.0f}' for r in values)} | {rate / bare_rate:.3f} |")
    print(f"\ngoal: braeburn >= 0.9 of the bare loop; {args.clock} clock, one torch thread, "
          f"{args.steps}/{2 * args.steps} steps, median of {args.rounds} alternating rounds")

if __name__ == "__main__":
    main()
