"""`braeburn bench` on the CPU with tiny workloads, its sums (FLOPs, MFU, speed-up) and its verdicts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import textwrap
from pathlib import Path
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from braeburn.cli import workloads
from braeburn.cli import bench
from braeburn.cli.main import main
from braeburn.devices.host import current_host
from braeburn.devices.registry import get_kind


def _bench_json(capsys, *args) -> tuple[int, dict | str]:
    code = main(["bench", "--json", *map(str, args)])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if code == 0 else captured.err


@pytest.mark.slow  # bench trains the MLP and CNN workloads (15 s on a loaded machine)
def test_tiny_mlp_and_cnn_on_the_cpu(capsys):
    code, result = _bench_json(capsys, "--devices", "cpu", "--size", "tiny", "--workload", "mlp,cnn", "--steps", 3,
                               "--warmup", 1)
    assert code == 0, result
    (cpu,) = result["devices"]
    assert cpu["device"] == "cpu" and cpu["matmul_tflops"]["fp32"] > 0 and cpu["h2d_gbps"] is None
    mlp, cnn = result["workloads"]
    assert (mlp["workload"], cnn["workload"]) == ("mlp", "cnn")
    # Linear layers 32->64->64->10: forward 2*in*out, backward 4*in*out, except that the first
    # layer computes no gradient for its input (the data): 2*in*out less there.
    assert mlp["flops_per_sample"] == 6 * (32 * 64 + 64 * 64 + 64 * 10) - 2 * 32 * 64
    row = mlp["devices"][0]
    assert row["steps"] == 3 and row["batch_size"] == 32 and row["samples_per_s"] > 0
    assert row["mfu"] == pytest.approx(mlp["flops_per_sample"] * row["samples_per_s"] / (cpu["matmul_tflops"]["fp32"] * 1e12))
    assert row["speedup_vs_cpu"] == 1.0 and "only cpu was benchmarked" in mlp["verdict"]


def test_a_long_bench_says_what_it_is_doing_on_stderr(capsys):
    """`--workload all` ran minutes with no output. Progress goes to stderr; stdout stays the JSON."""
    code = main(["bench", "--json", "--devices", "cpu", "--size", "tiny", "--workload", "mlp", "--steps", "2",
                 "--warmup", "1"])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["workloads"][0]["workload"] == "mlp"
    assert "braeburn bench: 1 workload(s) on cpu; measuring each device's matmul peak" in captured.err
    assert "braeburn bench: mlp (tiny, batch 32) on cpu: 1 warm-up + up to 2 timed steps..." in captured.err
    assert "braeburn bench: mlp on cpu: " in captured.err and "samples/s" in captured.err


@pytest.mark.slow  # bench runs workloads and draws the chart (6 s on a loaded machine)
def test_rich_output_and_plot(capsys, tmp_path):
    chart = tmp_path / "bench.png"
    code = main(["bench", "--size", "tiny", "--workload", "mlp", "--steps", "2", "--warmup", "0", "--batch-size", "8",
                 "--plot", str(chart)])
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert code == 0 and "matmul fp32 FLOP/s" in out and "mlp cpu fp32 8" in out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = main(["bench", "--size", "tiny", "--workload", "mlp", "--steps", "1", "--warmup", "0",
                 "--plot", str(tmp_path / "x.png")])
    assert code == 2 and "pip install 'braeburn[plot]'" in capsys.readouterr().err


@pytest.mark.slow  # bench trains the tiny BERT and GPT-2 workloads (17 s on a loaded machine)
def test_transformer_workloads_tiny_train_and_count_flops():
    cpu = get_kind("cpu")
    for name in ("bert-base", "gpt2-small"):
        built = workloads.build(name, "tiny")
        matmul_params = sum(m.weight.numel() for m in built.model.modules()
                            if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D")
        flops = workloads.training_flops_per_sample(built)
        tokens = built.make_batch(1)[0].shape[1]
        # 6 FLOPs per weight per token (forward + backward), plus attention; less the input-gradient
        # of nothing: embeddings are lookups, so this is a floor.
        assert flops >= 6 * matmul_params * tokens * 0.9, name
        row = bench.time_training(built, cpu, None, "no", 2, warmup=0, steps=1, max_seconds=30)
        assert row["samples_per_s"] > 0 and row["steps"] == 1


def test_timing_is_bracketed_by_the_device_kinds_synchronize():
    class CountingCpu(type(get_kind("cpu"))):
        calls = 0

        def synchronize(self) -> None:
            CountingCpu.calls += 1

    built = workloads.build("mlp", "tiny")
    row = bench.time_training(built, CountingCpu(), None, "no", 4, warmup=1, steps=3, max_seconds=30)
    # after the first warm-up step (its time, for the estimate), then before and after the timed steps, not inside
    assert row["steps"] == 3 and CountingCpu.calls == 3
    assert bench.matmul_tflops(CountingCpu(), "fp32", 64, 0.0) > 0


def test_on_a_cpu_alone_the_default_size_is_tiny_and_says_so(capsys):
    """The README's `braeburn bench --workload all` ran full-size BERT-base and GPT-2 on a 2-core CPU, minutes a
    step, with no word about --size tiny. Where only the CPU is benchmarked, the default is the tiny models."""
    code = main(["bench", "--json", "--devices", "cpu", "--workload", "mlp", "--steps", "1", "--warmup", "0"])
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert code == 0 and result["settings"]["size"] == "tiny" and result["workloads"][0]["size"] == "tiny"
    assert "--size auto: the tiny models, since only the CPU is benchmarked here; --size full" in captured.err
    cpu, cuda = get_kind("cpu"), get_kind("cuda")
    assert bench.resolve_size("auto", [cuda, cpu]) == ("full", None)  # an accelerator: the real models
    assert bench.resolve_size("full", [cpu]) == ("full", None) and bench.resolve_size("tiny", [cuda])[0] == "tiny"


class _Clock:
    """bench's clock in a test: time passes only when a step says so."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _SlowStep:
    """A workload whose every training step takes ``seconds`` on ``clock`` (a full-size model on a slow CPU)."""

    def __init__(self, clock: _Clock, seconds: float):
        self.model, self.calls = torch.nn.Linear(2, 1), 0
        self.make_batch = lambda n: (torch.randn(n, 2),)

        def loss(model, batch):
            self.calls += 1
            clock.now += seconds
            return model(batch[0]).sum()

        self.loss = loss


def test_a_slow_workload_is_cut_at_max_seconds_and_says_how_long_it_takes(capsys, monkeypatch):
    """Warm-up steps used to run in full whatever they cost (3 full BERT steps: minutes on a CPU) and nothing said
    how long a workload would take. Now warm-up and timing each stop after --max-seconds (at least one step each),
    and the first step's time gives an estimate, with how to shorten it."""
    clock = _Clock()
    monkeypatch.setattr(bench, "time", clock)
    slow = _SlowStep(clock, 48.0)  # a full BERT-base step on a busy 2-core CPU
    row = bench.time_training(slow, get_kind("cpu"), None, "no", 2, warmup=3, steps=10, max_seconds=30,
                              label="bert-base (full) on cpu")
    assert (slow.calls, row["steps"], clock.now) == (2, 1, 96.0)  # one warm-up and one timed step, not 3 + 1
    assert ("braeburn bench: bert-base (full) on cpu: 48.0 s for the first step (which pays one-time costs), so at "
            "most about 1.6 min for this one (warm-up and timing each stop after --max-seconds 30); --size tiny, or "
            "fewer --steps, is quicker") in capsys.readouterr().err
    tiny = _SlowStep(clock, 0.01)
    row = bench.time_training(tiny, get_kind("cpu"), None, "no", 2, warmup=3, steps=10, max_seconds=30, label="mlp")
    assert (tiny.calls, row["steps"]) == (13, 10) and "s a step" not in capsys.readouterr().err  # quick: no estimate
    assert bench.expected_seconds(0.4, 30, 30, 0.5) == pytest.approx(1.6)  # 2 steps in each phase
    assert bench.expected_seconds(0.01, 3, 10, 30) == pytest.approx(0.13)


class _ColdThenWarm(_SlowStep):
    """A first step that pays one-time costs (30 s), then 5 s steps."""

    def __init__(self, clock: _Clock):
        super().__init__(clock, 5.0)
        inner = self.loss

        def loss(model, batch):
            clock.now += 25.0 if self.calls == 0 else 0.0
            return inner(model, batch)

        self.loss = loss


def test_the_estimate_comes_from_a_warm_step_and_never_advises_the_size_in_use(capsys, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(bench, "time", clock)
    bench.time_training(_ColdThenWarm(clock), get_kind("cpu"), None, "no", 2, warmup=3, steps=10, max_seconds=100,
                        label="cnn (tiny) on cpu", size="tiny")
    said = capsys.readouterr().err
    assert said.count("s a step") == 1 and "cnn (tiny) on cpu: 5.0 s a step, so about 65 s" in said  # not 30 s a step
    assert "--size tiny" not in said and "fewer --steps, or a lower --max-seconds, is quicker" in said


def test_the_table_says_the_steps_really_timed_and_marks_a_single_one(capsys):
    rows = [{"device": "cpu", "precision": "no", "batch_size": 2, "samples_per_s": 10.0, "step_ms": 200.0,
             "speedup_vs_cpu": None, "achieved_tflops": None, "mfu": None, "steps": 1, "warmup": 1}]
    results = {"devices": [{"device": "cpu", "description": "cpu", "matmul_tflops": {}, "h2d_gbps": None}],
               "workloads": [{"workload": "mlp", "devices": rows, "verdict": ""}], "skipped": {},
               "settings": {"size": "tiny", "steps": 10, "warmup": 3, "max_seconds": 0.5}}
    bench.render(results)
    out = " ".join(capsys.readouterr().out.split())
    assert "1 timed step after 1 warm-up (asked 10 after 3: --max-seconds 0.5 cut it)" in out
    assert "10 timed steps" not in out and "10.0*" in out and "a single sample" in out


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_max_seconds_must_be_a_positive_number(capsys, value):
    assert main(["bench", "--max-seconds", value]) == 2
    err = capsys.readouterr().err
    assert "--max-seconds" in err and "above 0" in err and len(err.strip().splitlines()) == 1


def test_missing_transformers_skips_under_all_and_refuses_when_named(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert "pip install" in workloads.get_workload("gpt2-small").missing_dependency()
    code, message = _bench_json(capsys, "--size", "tiny", "--workload", "gpt2-small", "--steps", 1)
    assert code == 2 and "transformers" in message
    args = SimpleNamespace(devices="cpu", workload="all", size="tiny", mixed_precision="no", batch_size=None,
                           warmup=0, steps=1, max_seconds=5)
    result = bench.run_workloads(args, current_host())
    assert [r["workload"] for r in result["workloads"]] == ["mlp", "cnn"]
    assert set(result["skipped"]) == {"bert-base", "gpt2-small"}


def _result(rates: dict[str, float]) -> dict:
    return {"workload": "mlp", "size": "tiny", "batch_size": 32,
            "devices": [{"device": device, "samples_per_s": rate} for device, rate in rates.items()]}


def test_verdict_says_plainly_when_the_cpu_wins():
    assert bench.verdict(_result({"mps": 100.0, "cpu": 500.0})) == \
        "mlp (tiny, batch 32): the CPU is the faster choice, 5.00x faster than mps"
    assert bench.verdict(_result({"cuda": 900.0, "cpu": 300.0})) == \
        "mlp (tiny, batch 32): cuda is the faster choice, 3.00x faster than cpu"


def test_device_choice_asks_availability(fake_host):
    apple = fake_host("apple")
    assert [k.name for k in bench.choose_devices(None, apple)] == ["mps", "cpu"]
    with pytest.raises(ValueError, match="cuda is not usable here: .*Or leave cuda out"):
        bench.choose_devices("cpu,cuda", fake_host("linux_cpu"))
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        bench.choose_devices("tpu", apple)


def test_usage_errors(capsys, tmp_path):
    assert main(["bench", "--workload", "resnet"]) == 2
    assert "unknown workload 'resnet'" in capsys.readouterr().err
    assert main(["bench", "--steps", "0"]) == 2
    assert main(["bench", str(tmp_path / "nope.py")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow  # runs braeburn bench on a script as a subprocess (15 s)
def test_bench_times_a_users_script_through_the_probe(capsys, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent('''
        import torch
        from braeburn import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        for _ in range(100):
            loss = model(torch.randn(4, 8, device=accelerator.device)).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        raise SystemExit("bench should have stopped the script after its steps")
    '''))
    code, result = _bench_json(capsys, "--devices", "cpu", "--steps", 3, "--warmup", 1, script)
    assert code == 0, result
    (row,) = result["devices"]
    assert row["device"] == "cpu" and row["steps"] == 3 and row["step_ms"] > 0


@pytest.mark.slow  # bench runs the Trainer's precision trial (8 s on a loaded machine)
def test_auto_precision_shows_the_trainers_measured_table(capsys, monkeypatch, cpu_only):
    # The CPU given the Mac's facts for "auto" (no rule, candidates to measure): bench times them on the workload
    # as the Trainer would, and prints the same line.
    from braeburn.devices.cpu import CpuDevice

    monkeypatch.setattr(CpuDevice, "auto_precision_order", lambda self, host: ())
    monkeypatch.setattr(CpuDevice, "auto_precision_candidates", lambda self, host: ("bf16",))
    code, result = _bench_json(capsys, "--size", "tiny", "--workload", "mlp", "--steps", 2, "--devices", "cpu",
                               "--mixed-precision", "auto")
    row = result["workloads"][0]["devices"][0]
    assert code == 0 and row["precision"] in ("no", "bf16")
    assert row["precision_table"].startswith("float32 ") and " | bf16 " in row["precision_table"]
    assert row["precision_reason"].startswith("auto: ")
    assert main(["bench", "--size", "tiny", "--workload", "mlp", "--steps", "2", "--devices", "cpu",
                 "--mixed-precision", "auto"]) == 0
    assert "mlp on cpu: precision " in capsys.readouterr().out


@pytest.mark.slow  # the README's bench command as a process: 5 s on one idle thread, tens of seconds on a busy CPU
def test_the_readmes_bench_command_finishes_within_the_documented_factor_of_its_idle_time(tmp_path):
    """docs/check-and-bench.md measured the README's `braeburn bench --workload all --plot bench.png` (13.3 s idle,
    the README rounds it to 13 s) and asserted nothing about it. On one torch thread, its wall time stays within the
    factor the page states."""
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "check-and-bench.md").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `braeburn bench --workload all --plot bench.png`"))
    idle = float(re.search(r"\| (\d+(?:\.\d+)?) s \|$", row).group(1))
    factor = int(re.search(r"keeps its wall time within (\d+)x the idle row's", page).group(1))
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert f"the tiny models, {round(idle)} s on an idle 2-core" in readme
    env = {**os.environ, "OMP_NUM_THREADS": "1", "BRAEBURN_DEVICE": "cpu"}
    env.pop("BRAEBURN_MAX_STEPS", None)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "braeburn.cli.main", "bench", "--workload", "all", "--plot",
                           "bench.png"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    assert done.returncode == 0 and (tmp_path / "bench.png").is_file(), done.stderr[-3000:]
    assert "gpt2-small" in done.stdout and "tiny size" in done.stdout
    assert elapsed <= factor * idle, f"{elapsed:.1f} s; the page says {idle} s idle, at most {factor}x"


@pytest.mark.parametrize("load, threads, said", [(2.0, 2, True), (11.0, 2, True), (1.4, 2, False), (3.0, 1, False)])
def test_a_busy_cpu_is_said_to_make_its_figures_too_low(capsys, monkeypatch, load, threads, said):
    """On this project's 2-core machine at load 2-3, the README's bench gave the CPU 4.2 GFLOP/s and 1,859 mlp
    samples/s on torch's 2 threads, 153 GFLOP/s and 61,533 on one, and said nothing. Where the load average reaches
    the core count and torch uses several threads, one line says the CPU's figures can be many times too low."""
    host = replace(current_host(), cpu_count=2)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    bench._say_shared_caveats([get_kind("cpu")], host)
    err = capsys.readouterr().err
    line = (f"braeburn bench: the load average is {load:.1f} on 2 cores: other jobs share this CPU, and torch's "
            f"{threads} threads then spend steps waiting for each other, so the CPU's figures below can be many times "
            "too low; OMP_NUM_THREADS=1 before the command times one thread, or run it on an idle machine\n")
    assert err == (line if said else "")


def test_the_readmes_bench_says_when_the_cpu_is_busy(capsys, monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))  # busier than any machine's core count
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert main(["bench", "--json", "--devices", "cpu", "--workload", "mlp", "--steps", "1", "--warmup", "0"]) == 0
    assert "the load average is 64.0 on" in capsys.readouterr().err
