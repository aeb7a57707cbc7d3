"""Checks on this machine's fused AdamW kernel what braeburn's folded clip relies on (braeburn.accelerator.clip_fold):

    python benchmarks/clip_fold_check.py              # the GPU when there is one, else the CPU
    python benchmarks/clip_fold_check.py --json out.json

Against ``clip_grad_norm_`` followed by the step, with random gradients over 8 steps (lr 1e-3, weight decay 0.01):
- without clipping (norm far below the limit), the folded step is bitwise the same: parameters, moments, the
  gradients left behind, the norm;
- with clipping on every step, the norm is the same tensor, each gradient the kernel writes back is within 1 ulp of
  the clipped one (so a callback after the step reads clipped gradients); the parameters' largest difference is
  reported as a fraction of 2 ulps of their value plus lr * 2**-18 (the bound the CPU's tests hold).
It also times the clip plus the step both ways (GPT-2 small's parameter shapes, median of 50 steps). Exit status 1
when one of the first three claims fails. Seconds on a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

sys.path.insert(0, "src")
from braeburn.accelerator.clip_fold import clip_scale  # noqa: E402

EPS = torch.finfo(torch.float32).eps
GPT2_SHAPES = [(50257, 768), (1024, 768)] + [shape for _ in range(12) for shape in (
    (768,), (768,), (768, 2304), (2304,), (768, 768), (768,), (768,), (768,), (768, 3072), (3072,), (3072, 768),
    (768,))] + [(768,), (768,)]


def _params(shapes, device, seed=0):
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=generator).to(device)) for shape in shapes]


def _step(params, optimizer, fold: bool, limit: float) -> torch.Tensor:
    if fold:
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        optimizer.grad_scale = clip_scale(norm, limit)
        try:
            optimizer.step()
        finally:
            del optimizer.grad_scale
        return norm
    norm = torch.nn.utils.clip_grad_norm_(params, limit)
    optimizer.step()
    return norm


def _run(device, fold: bool, grad_size: float, steps: int = 8, lr: float = 1e-3):
    params = _params([(10_007,), (33, 7), (768, 768)], device)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, fused=True)
    draws = torch.Generator(device="cpu").manual_seed(1)
    out = []
    for _ in range(steps):
        for p in params:
            p.grad = (torch.randn(p.shape, generator=draws) * grad_size).to(device)
        norm = _step(params, optimizer, fold, 1.0)
        out.append((norm.clone(), [p.detach().clone() for p in params], [p.grad.clone() for p in params],
                    [optimizer.state[p]["exp_avg_sq"].clone() for p in params]))
    return out


def check(device) -> dict:
    plain, folded = _run(device, False, 1e-5), _run(device, True, 1e-5)
    unclipped_bitwise = all(torch.equal(a[0], b[0]) and all(map(torch.equal, a[1] + a[2] + a[3], b[1] + b[2] + b[3]))
                            for a, b in zip(plain, folded))
    plain, folded, lr = _run(device, False, 1.0), _run(device, True, 1.0), 1e-3
    norm_same = all(torch.equal(a[0], b[0]) for a, b in zip(plain, folded))
    grad_ulps = max(((ga - gb).abs() / (EPS * ga.abs()).clamp_min(1e-30)).max().item()
                    for a, b in zip(plain, folded) for ga, gb in zip(a[2], b[2]))
    param_bound = max(((pa - pb).abs() / (2 * EPS * torch.maximum(pa.abs(), pb.abs()) + lr * 2**-18)).max().item()
                      for a, b in zip(plain, folded) for pa, pb in zip(a[1], b[1]))
    return {"unclipped_bitwise": unclipped_bitwise, "clipped_norm_bitwise": norm_same,
            "clipped_grad_max_ulps": grad_ulps, "clipped_params_fraction_of_bound": param_bound,
            "ok": unclipped_bitwise and norm_same and grad_ulps <= 1.0}  # the parameters' fraction: reported


def time_clip_and_step(device, fold: bool, steps: int = 50) -> float:
    """Median seconds of the clip plus the fused AdamW step over GPT-2 small's parameters (clipping on)."""
    params = _params(GPT2_SHAPES, device)
    optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=True)
    for p in params:
        p.grad = torch.randn_like(p)
    times = []
    for _ in range(steps + 5):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        _step(params, optimizer, fold, 1.0)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times[5:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--timing-steps", type=int, default=50)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__,
              **check(device)}
    for name, fold in (("clip_grad_norm_then_step_ms", False), ("folded_step_ms", True)):
        result[name] = round(time_clip_and_step(device, fold, args.timing_steps) * 1e3, 3)
    print(json.dumps(result), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
