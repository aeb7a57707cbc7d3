"""benchmarks/peers.py's variants: each knob reaches what it names.

Run in a child process, so the global attention-backend and inductor settings stay out of this one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys, torch
sys.path.insert(0, "benchmarks")
import peers
args = peers.argparse.Namespace(sdpa=sys.argv[1], gpt2_dropout=0.0, compile_mode="max-autotune-no-cudagraphs",
                                inductor=["coordinate_descent_tuning=True"])
peers._apply_knobs(args)
import torch._inductor.config as inductor_config
cfg = peers.WORKLOADS["gpt2-small"](True).make_model().config
print(json.dumps({"flash": torch.backends.cuda.flash_sdp_enabled(),
                  "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                  "cudnn": torch.backends.cuda.cudnn_sdp_enabled(), "math": torch.backends.cuda.math_sdp_enabled(),
                  "coordinate": inductor_config.coordinate_descent_tuning, "mode": peers.KNOBS["compile_mode"],
                  "dropout": [cfg.resid_pdrop, cfg.embd_pdrop, cfg.attn_pdrop]}))
"""


def _knobs(sdpa: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, sdpa], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # builds and compiles each benchmark variant (9-22 s)
def test_each_variant_sets_the_backend_dropout_compile_mode_and_inductor_setting_it_names():
    flash = _knobs("flash")
    assert (flash["flash"], flash["efficient"], flash["cudnn"], flash["math"]) == (True, False, False, False)
    assert flash["coordinate"] is True and flash["mode"] == "max-autotune-no-cudagraphs"
    assert flash["dropout"] == [0.0, 0.0, 0.0]
    efficient = _knobs("efficient")
    assert (efficient["flash"], efficient["efficient"], efficient["cudnn"]) == (False, True, False)


def test_braeburn_compile_nofold_runs_braeburn_compile_with_the_fold_off_and_puts_it_back(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import peers
    from braeburn.trainer.loop import CoreTrainer

    seen = []
    monkeypatch.setattr(CoreTrainer, "folds_clip_into_step", True)  # as an A/B with the fold on would set it
    monkeypatch.setattr(peers, "run_braeburn_compiled", lambda *args: seen.append(CoreTrainer.folds_clip_into_step))
    peers.RUNNERS["braeburn-compile-nofold"](None, None, None, None, False)
    assert seen == [False] and CoreTrainer.folds_clip_into_step is True


def test_rotate_shifts_the_order_so_that_each_round_puts_another_runner_first(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import peers

    runners = ["bare+compile", "braeburn-compile", "bare+compile+clip"]
    assert [peers.rotated(runners, k)[0] for k in range(3)] == runners
    assert peers.rotated(runners, 4) == ["braeburn-compile", "bare+compile+clip", "bare+compile"]
    assert sorted(peers.rotated(runners, 2)) == sorted(runners) and peers.rotated([], 1) == []


def test_each_runner_gets_its_own_config_with_the_cache_off(monkeypatch):
    """A Trainer that turns ``model.config.use_cache`` off (as both Trainers do) must not change the model the next
    runner of the process builds: each model has its own config, and every runner trains without the cache."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import peers

    for name in ("gpt2-small", "llama-small", "bert-base"):
        workload = peers.WORKLOADS[name](True)
        first = workload.make_model()
        assert first.config.use_cache is False, name
        first.config.use_cache = True  # what a runner may do to its model's config
        first.config.hidden_dropout_prob = first.config.resid_pdrop = 0.5
        second = workload.make_model()
        assert second.config is not first.config and second.config.use_cache is False, name
        assert getattr(second.config, "resid_pdrop", None) != 0.5 and getattr(second.config, "hidden_dropout_prob", 0) != 0.5
