"""braeburn against its peers on the same workloads, in one process: samples/s after warm-up.

    python benchmarks/peers.py                      # all workloads, all frameworks, on the GPU
    python benchmarks/peers.py --workloads gpt2-small --frameworks braeburn,bare
    python benchmarks/peers.py --tiny --steps 6     # small configs: checks the script on a CPU

Every framework trains the same model (a fresh one, same seed) on the same synthetic batches with
bf16 autocast (fp32 on the CPU) and an AdamW optimizer, and is timed from the end of step
`warmup` to the end of the last step, with one device synchronisation at each end. Frameworks run
one after another with memory freed in between; global torch flags are reset after each.
Peers use their defaults; braeburn uses its defaults (the user picks only model, data and batch).
"""

from __future__ import annotations

import argparse
import ast
import copy
import gc
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

# ----------------------------------------------------------------------------- workloads


class WithLoss(nn.Module):
    """An image classifier that returns {"loss", "logits"} as Transformers models do."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net
        self.loss = nn.CrossEntropyLoss()

    def forward(self, pixel_values, labels=None):
        logits = self.net(pixel_values)
        return {"loss": self.loss(logits, labels), "logits": logits}


class SyntheticDataset(torch.utils.data.Dataset):
    """`length` samples drawn from a pool of `pool` fixed random samples (saves host memory)."""

    def __init__(self, make_sample: Callable[[torch.Generator], dict], length: int, pool: int = 256):
        g = torch.Generator().manual_seed(0)
        self.samples = [make_sample(g) for _ in range(min(pool, length))]
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return self.samples[index % len(self.samples)]


@dataclass
class Workload:
    name: str
    batch_size: int
    make_model: Callable[[], nn.Module]
    make_sample: Callable[[torch.Generator], dict]
    flops_per_sample: Callable[[nn.Module], float]


def _bert(tiny: bool) -> Workload:
    from transformers import BertConfig, BertForSequenceClassification

    seq = 32 if tiny else 128
    cfg = BertConfig(num_labels=2, attn_implementation="sdpa")
    if tiny:
        cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                         num_labels=2, attn_implementation="sdpa")

    def sample(g):
        return {"input_ids": torch.randint(0, cfg.vocab_size, (seq,), generator=g),
                "attention_mask": torch.ones(seq, dtype=torch.long),
                "labels": torch.randint(0, 2, (), generator=g)}

    def flops(model):
        n = sum(p.numel() for p in model.parameters()) - cfg.vocab_size * cfg.hidden_size
        return 6 * n * seq + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq * seq

    return Workload("bert-base", 4 if tiny else 32, lambda: _fresh(BertForSequenceClassification, cfg), sample, flops)


def _resnet(tiny: bool) -> Workload:
    import torchvision

    size = 32 if tiny else 224

    def make():
        return WithLoss(torchvision.models.resnet18(num_classes=10) if tiny else torchvision.models.resnet50())

    def sample(g):
        return {"pixel_values": torch.randn(3, size, size, generator=g),
                "labels": torch.randint(0, 10 if tiny else 1000, (), generator=g)}

    return Workload("resnet50", 4 if tiny else 64, make, sample, lambda m: 3 * 4.1e9 * (size / 224) ** 2)


def _fresh(model_class, config):
    """A model of ``model_class`` on its own copy of ``config``, with ``use_cache`` off where the config has it.

    Its own copy: the Trainers set ``model.config.use_cache = False`` before training (Transformers'
    TrainingArguments.use_cache), and a config shared by every runner of a process carried that into the runners
    after them: a bare loop placed after braeburn trained without the cache (4-6% faster on GPT-2 small, 0.5 GiB
    less memory) and one placed first with it. Off for every runner: it is how both Trainers train, and a training
    forward has no use for the keys and values it would return."""
    config = copy.deepcopy(config)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return model_class(config)


def _gpt2(tiny: bool) -> Workload:
    from transformers import GPT2Config, GPT2LMHeadModel

    seq = 64 if tiny else 1024
    cfg = GPT2Config(n_positions=seq, attn_implementation="sdpa")
    if tiny:
        cfg = GPT2Config(n_embd=64, n_layer=2, n_head=2, n_positions=seq, attn_implementation="sdpa")
    if KNOBS.get("gpt2_dropout") is not None:  # GPT-2's config trains with dropout 0.1; llm.c's anchor with none
        cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = KNOBS["gpt2_dropout"]

    def sample(g):
        ids = torch.randint(0, cfg.vocab_size, (seq,), generator=g)
        return {"input_ids": ids, "labels": ids}

    def flops(model):  # nanoGPT's estimate: 6N per token plus attention
        n = sum(p.numel() for p in model.parameters()) - cfg.n_positions * cfg.n_embd
        return (6 * n + 12 * cfg.n_layer * cfg.n_embd * seq) * seq

    return Workload("gpt2-small", 2 if tiny else 8, lambda: _fresh(GPT2LMHeadModel, cfg), sample, flops)


def _llama(tiny: bool) -> Workload:
    """A Llama of GPT-2 small's size (12 layers, 768 wide, 32,000-token vocabulary): what people pretrain today."""
    from transformers import LlamaConfig, LlamaForCausalLM

    seq = 64 if tiny else 1024
    width, layers, heads = (64, 2, 2) if tiny else (768, 12, 12)
    cfg = LlamaConfig(hidden_size=width, intermediate_size=width * 8 // 3, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=heads, vocab_size=32000,
                      max_position_embeddings=seq, attn_implementation="sdpa")

    def sample(g):
        ids = torch.randint(0, cfg.vocab_size, (seq,), generator=g)
        return {"input_ids": ids, "labels": ids}

    def flops(model):
        n = sum(p.numel() for p in model.parameters()) - cfg.vocab_size * width
        return (6 * n + 12 * layers * width * seq) * seq

    return Workload("llama-small", 2 if tiny else 8, lambda: _fresh(LlamaForCausalLM, cfg), sample, flops)


KNOBS: dict = {}  # --gpt2-dropout, --compile-mode: what a variant changes (set by main)

WORKLOADS = {"bert-base": _bert, "resnet50": _resnet, "gpt2-small": _gpt2, "llama-small": _llama}

# ----------------------------------------------------------------------------- timing


class StepClock:
    """Marks the end of step `warmup` and of step `last`, synchronising the device only there.

    With ``profile`` > 0, the ``profile`` steps just before the timed window run under torch.profiler
    (after compiling, outside the timing) and ``profile_table`` holds where their time went.
    """

    def __init__(self, device: torch.device, warmup: int, last: int, profile: int = 0):
        self.device, self.warmup, self.last, self.profile = device, warmup, last, profile
        self.t0 = self.t1 = None
        self.profiler = None
        self.profile_table = ""

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def step_done(self, step: int) -> None:  # step counts from 1
        if self.profile and step == self.warmup - self.profile:
            self._sync()
            self.profiler = torch.profiler.profile(activities=_profiler_activities())
            self.profiler.__enter__()
            self.profile_started = time.perf_counter()
        if self.profiler is not None and step == self.warmup:
            self._sync()
            wall = time.perf_counter() - self.profile_started
            self.profiler.__exit__(None, None, None)
            self.profile_table = _profile_summary(self.profiler, wall, self.profile, self.device)
            self.profiler = None
        if step == self.warmup:
            self._sync()
            self.t0 = time.perf_counter()
        elif step == self.last:
            self._sync()
            self.t1 = time.perf_counter()

    def samples_per_second(self, batch: int) -> float:
        if self.t0 is None or self.t1 is None:
            return float("nan")
        return (self.last - self.warmup) * batch / (self.t1 - self.t0)


def _profiler_activities():
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return activities


def _profile_summary(profiler, wall: float, steps: int, device) -> str:
    """Per step: wall time, GPU kernel time, and the kernels and host ops that take the most."""
    events = profiler.key_averages()
    on_device = "device_time_total" if device.type == "cuda" else "cpu_time_total"
    kernels = sum(e.device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA) \
        if device.type == "cuda" else 0.0
    head = (f"profile of {steps} steps: {wall / steps * 1e3:.2f} ms/step wall (profiled), "
            f"{kernels / steps / 1e3:.2f} ms/step of GPU kernels")
    return head + "\n" + events.table(sort_by=on_device, row_limit=25, max_name_column_width=70)


def collate(items):
    return {k: torch.stack([torch.as_tensor(item[k]) for item in items]) for k in items[0]}


# ----------------------------------------------------------------------------- runners


def run_bare(w: Workload, ds, clock: StepClock, device, bf16: bool, compile_model: bool = False,
             pin: bool = False, clip: float = 0.0):
    """A hand-written loop: fused AdamW, pinned memory, non-blocking copies (gradient clipping at ``clip`` when
    given, as the Trainers do by default)."""
    model = w.make_model().to(device)
    if pin:  # what braeburn does before compiling: no graph break from Transformers' loss lookup
        from braeburn.plan.compile_policy import pin_traced_attributes

        pin_traced_attributes(model)
    step_fn = torch.compile(model, mode=KNOBS.get("compile_mode")) if compile_model else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    dl = torch.utils.data.DataLoader(ds, batch_size=w.batch_size, shuffle=True, collate_fn=collate,
                                     pin_memory=device.type == "cuda", drop_last=True)
    for step, batch in enumerate(dl, 1):
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = step_fn(**batch)["loss"]
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        clock.step_done(step)


def run_bare_compiled(w, ds, clock, device, bf16):
    run_bare(w, ds, clock, device, bf16, compile_model=True)


def run_bare_compiled_pinned(w, ds, clock, device, bf16):
    """bare+compile without the graph break (braeburn.plan.compile_policy.pin_traced_attributes first)."""
    run_bare(w, ds, clock, device, bf16, compile_model=True, pin=True)


def run_bare_compiled_clipped(w, ds, clock, device, bf16):
    """bare+compile with gradient clipping at 1.0 (the Trainers' default max_grad_norm): clipping's share."""
    run_bare(w, ds, clock, device, bf16, compile_model=True, clip=1.0)


def run_accelerate(w: Workload, ds, clock: StepClock, device, bf16: bool):
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="bf16" if bf16 else "no", cpu=device.type == "cpu")
    model = w.make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dl = torch.utils.data.DataLoader(ds, batch_size=w.batch_size, shuffle=True, collate_fn=collate, drop_last=True)
    model, opt, dl = accelerator.prepare(model, opt, dl)
    for step, batch in enumerate(dl, 1):
        loss = model(**batch)["loss"]
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        clock.step_done(step)


def lightning_parts(w: Workload, clock: StepClock):
    """The LightningModule around the workload's model, and the callback that ticks the clock."""
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = w.make_model()

        def training_step(self, batch, batch_idx):
            return self.model(**batch)["loss"]

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    class Clock(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            clock.step_done(trainer.global_step)

    return Module(), Clock()


def run_lightning(w: Workload, ds, clock: StepClock, device, bf16: bool):
    import lightning as L

    module, tick = lightning_parts(w, clock)
    dl = torch.utils.data.DataLoader(ds, batch_size=w.batch_size, shuffle=True, collate_fn=collate, drop_last=True)
    trainer = L.Trainer(accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
                        precision="bf16-mixed" if bf16 else "32-true", max_steps=clock.last, logger=False,
                        enable_checkpointing=False, callbacks=[tick], enable_model_summary=False)
    trainer.fit(module, dl)


def run_hf_trainer(w: Workload, ds, clock: StepClock, device, bf16: bool):
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            clock.step_done(state.global_step)

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=w.batch_size, max_steps=clock.last,
                                 bf16=bf16, use_cpu=device.type == "cpu", report_to=[], save_strategy="no",
                                 logging_steps=10_000, learning_rate=1e-4, disable_tqdm=True)
        trainer = Trainer(model=w.make_model(), args=args, train_dataset=ds, data_collator=collate,
                          callbacks=[Clock()])
        trainer.train()


def _run_braeburn(w: Workload, ds, clock: StepClock, device, **overrides):
    from braeburn import Trainer, TrainingConfig
    from braeburn.trainer.callbacks import Callback

    class Clock(Callback):
        def on_step_end(self, trainer, state, **kwargs):
            clock.step_done(state.global_step)

    with tempfile.TemporaryDirectory() as out:
        config = TrainingConfig(output_dir=out, overwrite_output_dir=True, per_device_train_batch_size=w.batch_size,
                                max_steps=clock.last, save_strategy="no", learning_rate=1e-4,
                                use_cpu=device.type == "cpu", **overrides)
        trainer = Trainer(w.make_model(), config, train_dataset=ds, collate_fn=collate, callbacks=[Clock()])
        trainer.train()
    clipper = trainer._clipper  # how the last steps clipped: inside the fused AdamW step, or clip_grad_norm_
    why = ("max_grad_norm=0" if config.max_grad_norm <= 0 else "the fold is off" if not clipper.fold
           else "not compiled" if not clipper.compiled else clipper.refusal)
    print(f"braeburn clip: {'clip_grad_norm_ (' + why + ')' if why else 'folded into the fused optimizer step'}",
          flush=True)


def run_braeburn(w: Workload, ds, clock: StepClock, device, bf16: bool):
    """braeburn's defaults: the user picks only the model, the data and the batch size."""
    _run_braeburn(w, ds, clock, device)


def run_braeburn_compiled(w, ds, clock, device, bf16):
    """braeburn with compile=True: what compile=auto does once a run is long enough to earn the compile back."""
    _run_braeburn(w, ds, clock, device, compile="true", torch_compile_mode=KNOBS.get("compile_mode"))


def run_braeburn_compiled_unclipped(w, ds, clock, device, bf16):
    """braeburn compiled with max_grad_norm=0 (no clipping, as the bare loop): the host's share without clipping."""
    _run_braeburn(w, ds, clock, device, compile="true", max_grad_norm=0.0)


def run_braeburn_compiled_unfolded(w, ds, clock, device, bf16):
    """braeburn-compile with the clip kept out of the fused AdamW step (clip_grad_norm_'s norm and multiply passes,
    as before the fold): the A/B of braeburn.trainer.clipping's fold."""
    from braeburn.trainer.loop import CoreTrainer

    saved, CoreTrainer.folds_clip_into_step = CoreTrainer.folds_clip_into_step, False
    try:
        run_braeburn_compiled(w, ds, clock, device, bf16)
    finally:
        CoreTrainer.folds_clip_into_step = saved


def run_braeburn_eager(w, ds, clock, device, bf16):
    """braeburn with compile=False (the channels-last layout still applies to CNNs on CUDA)."""
    _run_braeburn(w, ds, clock, device, compile="false")


def run_braeburn_eager_nchw(w, ds, clock, device, bf16):
    """As braeburn-eager, with the channels-last layout turned off (to measure what it buys)."""
    from braeburn.devices.cuda import CudaDevice

    saved, CudaDevice.channels_last_helps = CudaDevice.channels_last_helps, False
    try:
        run_braeburn_eager(w, ds, clock, device, bf16)
    finally:
        CudaDevice.channels_last_helps = saved


RUNNERS = {"hf-trainer": run_hf_trainer, "accelerate": run_accelerate, "lightning": run_lightning,
           "bare": run_bare, "bare+compile": run_bare_compiled, "bare+compile+pin": run_bare_compiled_pinned,
           "bare+compile+clip": run_bare_compiled_clipped, "braeburn-compile-noclip": run_braeburn_compiled_unclipped,
           "braeburn-compile-nofold": run_braeburn_compiled_unfolded,
           "braeburn": run_braeburn,
           "braeburn-compile": run_braeburn_compiled, "braeburn-eager": run_braeburn_eager, "braeburn-eager-nchw": run_braeburn_eager_nchw}
PEERS = ("hf-trainer", "accelerate", "lightning")

# ----------------------------------------------------------------------------- main


def matmul_peak_tflops(device: torch.device, dtype=torch.bfloat16, n: int = 8192) -> float:
    if device.type != "cuda":
        n, dtype = 1024, torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    reps = 20 if device.type == "cuda" else 3
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e12


def _reset_globals():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True  # torch's default
    torch.backends.cudnn.benchmark = False
    torch.set_float32_matmul_precision("highest")
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _gc_recorder(events: list):
    """A gc.callbacks entry that appends each collection's (start, seconds, generation) to ``events``."""
    started = []

    def callback(phase: str, info: dict) -> None:
        now = time.perf_counter()
        if phase == "start":
            started[:] = [now]
        elif started:
            events.append((started[0], now - started[0], info["generation"]))
    return callback


def _collections_between(events: list, t0: float | None, t1: float | None) -> dict:
    """The collections that began inside the timed window: count and milliseconds per generation."""
    inside = [e for e in events if t0 is not None and t1 is not None and t0 <= e[0] < t1]
    return {str(g): {"count": sum(1 for e in inside if e[2] == g),
                     "ms": round(sum(e[1] for e in inside if e[2] == g) * 1e3, 2)} for g in (0, 1, 2)}


def run_one(framework: str, workload: Workload, device, warmup: int, steps: int, bf16: bool,
            profile: int = 0) -> dict:
    torch.manual_seed(0)
    ds = SyntheticDataset(workload.make_sample, length=(steps + 2) * workload.batch_size)
    clock = StepClock(device, warmup, steps, profile)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    error = None
    collections: list[tuple[float, float, int]] = []  # Python's garbage collections: start, seconds, generation
    gc.callbacks.append(callback := _gc_recorder(collections))
    try:
        RUNNERS[framework](workload, ds, clock, device, bf16)
    except Exception as exc:  # one framework failing must not hide the others' numbers
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        gc.callbacks.remove(callback)
    result = {"framework": framework, "workload": workload.name, "samples_per_s": clock.samples_per_second(
        workload.batch_size), "wall_s": time.perf_counter() - start, "error": error,
        "gc_in_window": _collections_between(collections, clock.t0, clock.t1)}
    if device.type == "cuda":
        result["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if clock.profile_table:
        print(f"== {framework} / {workload.name}: {clock.profile_table}", flush=True)
    _reset_globals()
    return result


def table(results: list[dict], peak: float, flops: dict[str, float]) -> str:
    lines = ["| workload | framework | samples/s | vs best peer | MFU | note |", "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["workload"] for r in results):
        rows = [r for r in results if r["workload"] == name]
        peer_rates = [r["samples_per_s"] for r in rows if r["framework"] in PEERS and not math.isnan(r["samples_per_s"])]
        best = max(peer_rates) if peer_rates else float("nan")
        for r in rows:
            rate = r["samples_per_s"]
            mfu = rate * flops[name] / (peak * 1e12) if peak else float("nan")
            lines.append(f"| {name} | {r['framework']} | {rate:.1f} | {rate / best:.2f}x | {mfu:.1%} | "
                         f"{r['error'] or ''} |")
    return "\n".join(lines)


def _apply_knobs(args) -> None:
    """The variant this run measures: attention backend, dropout, compile mode, inductor settings."""
    KNOBS.update(gpt2_dropout=args.gpt2_dropout, compile_mode=args.compile_mode)
    if args.sdpa != "auto":
        for backend in ("flash", "mem_efficient", "cudnn", "math"):
            getattr(torch.backends.cuda, f"enable_{backend}_sdp")(backend.endswith(args.sdpa))
    for setting in args.inductor:
        import torch._inductor.config as inductor_config

        key, _, value = setting.partition("=")
        setattr(inductor_config, key, ast.literal_eval(value))
    knobs = {k: v for k, v in vars(args).items() if k in ("sdpa", "gpt2_dropout", "compile_mode", "inductor")}
    print(f"variant: {json.dumps(knobs)}", flush=True)


def rotated(frameworks: list[str], by: int) -> list[str]:
    """``frameworks`` in their order shifted left by ``by`` places (the first ``by`` go last)."""
    if not frameworks:
        return frameworks
    by %= len(frameworks)
    return frameworks[by:] + frameworks[:by]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="bert-base,resnet50,gpt2-small")
    parser.add_argument("--frameworks", default="hf-trainer,accelerate,lightning,bare,bare+compile,braeburn")
    parser.add_argument("--warmup", type=int, default=15, help="steps before timing starts (compile happens here)")
    parser.add_argument("--steps", type=int, default=60, help="last step timed")
    parser.add_argument("--tiny", action="store_true", help="tiny configs, to check the script on a CPU")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--profile", type=int, default=0,
                        help="profile this many steps just before the timed window and print where the time went")
    parser.add_argument("--sdpa", choices=("auto", "flash", "efficient", "cudnn", "math"), default="auto",
                        help="the only attention backend torch may pick (default: torch's own choice)")
    parser.add_argument("--gpt2-dropout", type=float, default=None,
                        help="GPT-2's three dropout rates (default: its config's 0.1)")
    parser.add_argument("--compile-mode", default=None, help="torch.compile's mode for bare+compile and "
                        "braeburn-compile, e.g. max-autotune-no-cudagraphs")
    parser.add_argument("--inductor", action="append", default=[], metavar="KEY=VALUE",
                        help="set torch._inductor.config.KEY (a Python literal), e.g. coordinate_descent_tuning=True")
    parser.add_argument("--rotate", type=int, default=0, metavar="K",
                        help="run the frameworks in their order rotated by K (pass the round's number): a runner's "
                             "place in the process moves its rate (2.8%% on an H200), so rounds should not share one")
    args = parser.parse_args()
    _apply_knobs(args)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bf16 = device.type == "cuda"
    peak = matmul_peak_tflops(device)
    name = torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu"
    print(f"device: {name}; torch {torch.__version__}; measured matmul peak {peak:.0f} TFLOP/s "
          f"({'bf16' if bf16 else 'fp32'})", flush=True)
    results, flops = [], {}
    for wname in args.workloads.split(","):
        workload = WORKLOADS[wname](args.tiny)
        flops[wname] = workload.flops_per_sample(workload.make_model())
        for framework in rotated(args.frameworks.split(","), args.rotate):
            result = run_one(framework, workload, device, args.warmup, args.steps, bf16, args.profile)
            print(json.dumps(result), flush=True)
            results.append(result)
    print(table(results, peak, flops))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "peak_tflops": peak, "results": results,
                       "flops_per_sample": flops, "python": sys.version.split()[0], "pid": os.getpid()}, f, indent=2)


if __name__ == "__main__":
    main()
