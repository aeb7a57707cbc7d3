"""Clipping folded into the fused Adam/AdamW step (braeburn.accelerator.clip_fold), against
``clip_grad_norm_`` followed by the step, on the CPU's fused kernel with random tensors."""

from __future__ import annotations

import pytest
import torch

from braeburn import Accelerator
from braeburn.accelerator.clip_fold import clip_scale, fold_refusal
from braeburn.accelerator.core import AcceleratedOptimizer

EPS = torch.finfo(torch.float32).eps


def _steps(fold: bool, grad_size: float, lr: float = 1e-3, steps: int = 8, cls=torch.optim.AdamW,
           dtype=torch.float32):
    """Parameters, gradients after each step and norms of ``steps`` steps; gradients of about ``grad_size``
    each, clipped at 1.0 (two parameters, 10,007 and 231 values: the kernel's vector loop and its tail)."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(10_007).to(dtype)), torch.nn.Parameter(torch.randn(33, 7).to(dtype))]
    optimizer = cls(params, lr=lr, weight_decay=0.01, fused=True)
    draws = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        for p in params:
            p.grad = (torch.randn(p.shape, generator=draws) * grad_size).to(dtype)
        if fold:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
            optimizer.grad_scale = clip_scale(norm, 1.0)
            optimizer.step()
            del optimizer.grad_scale
        else:
            norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
        out.append((norm, [p.detach().clone() for p in params], [p.grad.clone() for p in params],
                    [optimizer.state[p]["exp_avg_sq"].clone() for p in params]))
    return out


@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.Adam])
def test_a_fold_that_does_not_clip_is_bitwise_the_clip_grad_norm_step(cls):
    """Norm about 1e-2 of the limit: the coefficient is exactly 1.0, and so the whole step is the same, bit for bit
    (parameters, moments, the gradients left behind, the norm)."""
    for (norm_a, params_a, grads_a, sq_a), (norm_b, params_b, grads_b, sq_b) in zip(
            _steps(False, 1e-4, cls=cls), _steps(True, 1e-4, cls=cls)):
        assert torch.equal(norm_a, norm_b)
        assert all(map(torch.equal, params_a + grads_a + sq_a, params_b + grads_b + sq_b))


@pytest.mark.parametrize("lr", [1e-5, 1e-3, 1e-1])
def test_a_fold_that_clips_differs_from_clip_grad_norm_only_by_rounding(lr):
    """Gradients of norm ~100 clipped to 1.0 on every step, 8 steps. The norm is the same tensor; each clipped
    gradient is within one ulp of clip_grad_norm_'s (g / (1/c) against g * c); the parameters within two ulps of
    their value plus lr * 2**-18 (measured worst: lr * 2.3 * 2**-20, at lr 0.1)."""
    differs = False
    for (norm_a, params_a, grads_a, _), (norm_b, params_b, grads_b, _) in zip(
            _steps(False, 1.0, lr=lr), _steps(True, 1.0, lr=lr)):
        assert torch.equal(norm_a, norm_b) and norm_a > 50
        for a, b in zip(grads_a, grads_b):
            assert ((a - b).abs() <= EPS * a.abs()).all()
            differs = differs or not torch.equal(a, b)
        for a, b in zip(params_a, params_b):
            bound = 2 * EPS * torch.maximum(a.abs(), b.abs()) + lr * 2**-18
            assert ((a - b).abs() <= bound).all()
    assert differs  # not bitwise: why the Trainer folds only where it compares nothing bit for bit


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gradients_folded_stay_within_an_ulp_of_clip_grad_norm_(dtype):
    """A model in float16/bfloat16 with a fused AdamW: the coefficient is a half-precision number, its inverse is
    taken in float32 (where the coefficient is exact), so g / (1/c) rounds to within one ulp of g * c. Inverted in
    float16 first, float16 gradients came out up to 2.65 ulps away."""
    eps = torch.finfo(dtype).eps
    for (norm_a, _, grads_a, _), (norm_b, _, grads_b, _) in zip(
            _steps(False, 1.0, steps=3, dtype=dtype), _steps(True, 1.0, steps=3, dtype=dtype)):
        assert torch.equal(norm_a, norm_b) and norm_a > 50
        for a, b in zip(grads_a, grads_b):
            assert ((a.float() - b.float()).abs() <= eps * a.float().abs()).all()


def test_clip_scale_is_one_exactly_below_the_limit_and_infinite_norms_zero_or_nan_the_gradients():
    assert clip_scale(torch.tensor(0.5), 1.0).item() == 1.0
    assert clip_scale(torch.tensor(3.0), float("inf")).item() == 1.0  # max_grad_norm=0, measured only
    assert clip_scale(torch.tensor(4.0), 1.0).item() == pytest.approx(4.0, rel=1e-6)
    assert clip_scale(torch.tensor(4.0), 1.0).dtype == torch.float32
    assert clip_scale(torch.tensor(2.0, dtype=torch.bfloat16), 1.0).dtype == torch.float32  # the kernel reads a float
    # clip_grad_norm_ multiplies by 0 (an infinite norm) or NaN (inf/inf, a NaN norm): dividing by inf / NaN matches
    assert clip_scale(torch.tensor(float("inf")), 1.0).item() == float("inf")
    assert clip_scale(torch.tensor(float("inf")), float("inf")).isnan()
    assert clip_scale(torch.tensor(float("nan")), 1.0).isnan()


def _fused(cls=torch.optim.AdamW, **kwargs):
    return cls([torch.nn.Parameter(torch.zeros(3))], lr=0.1, **kwargs)


class _OwnAdamW(torch.optim.AdamW):
    def step(self, closure=None):  # a subclass's step may never read grad_scale
        return None


def _refusal(optimizer, **facts):
    kwargs = dict(grad_scaler=False, kernel_applies_grad_scale=True, sharded=False, watched=False) | facts
    return fold_refusal(optimizer, **kwargs)


def test_the_fold_is_refused_where_the_kernel_would_not_clip_or_something_else_owns_grad_scale():
    assert _refusal(_fused(fused=True)) is None
    assert _refusal(_fused(torch.optim.Adam, fused=True)) is None
    assert "grad scaler" in _refusal(_fused(fused=True), grad_scaler=True)
    assert "FSDP" in _refusal(_fused(fused=True), sharded=True)
    assert "braeburn check" in _refusal(_fused(fused=True), watched=True)
    assert "ignore grad_scale" in _refusal(_fused(fused=True), kernel_applies_grad_scale=False)
    assert "not fused" in _refusal(_fused())
    assert "not fused" in _refusal(_fused(foreach=True))
    assert "is not torch.optim.Adam" in _refusal(_OwnAdamW([torch.nn.Parameter(torch.zeros(3))], fused=True))
    assert "is not torch.optim.Adam" in _refusal(torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.1))
    own = _fused(fused=True)
    own.grad_scale = torch.tensor(2.0)
    assert "grad_scale of its own" in _refusal(own)


def test_the_fold_is_refused_for_float64_parameters_and_unless_the_step_holds_exactly_the_clipped_parameters():
    """The kernel reads grad_scale as a float32 (float64 gradients would be clipped with float32's rounding, about
    5e8 float64 ulps off), and it scales the gradients of the parameters it holds, all of them."""
    wide = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))], lr=0.1, fused=True)
    assert "float64" in _refusal(wide)
    held, other = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.AdamW([held], lr=0.1, fused=True)
    assert _refusal(optimizer, clipped=[held]) is None
    assert "does not hold every parameter" in _refusal(optimizer, clipped=[held, other])
    both = torch.optim.AdamW([held, other], lr=0.1, fused=True)  # ``other``: a loss's temperature, say
    assert _refusal(both, clipped=[held]) is None  # no gradient to scale
    other.grad = torch.ones(2)
    assert "not clipped" in _refusal(both, clipped=[held])


@pytest.mark.usefixtures("cpu_only")
def test_the_accelerator_asks_its_own_facts_and_refuses_an_optimizer_it_did_not_prepare(monkeypatch):
    acc = Accelerator(cpu=True)
    optimizer = acc.prepare(_fused(fused=True))
    assert acc.clip_fold_refusal(optimizer) is None
    assert "not prepared" in acc.clip_fold_refusal(_fused(fused=True))
    monkeypatch.setenv("BRAEBURN_CHECK_DIR", "/nonexistent")  # braeburn check watches this run's gradients
    assert "braeburn check" in acc.clip_fold_refusal(optimizer)


@pytest.mark.usefixtures("cpu_only")
def test_a_prepared_optimizer_divides_by_its_clip_scale_for_one_step_only():
    acc = Accelerator(cpu=True)
    param = torch.nn.Parameter(torch.ones(4))
    optimizer = acc.prepare(torch.optim.AdamW([param], lr=0.1, fused=True))
    assert isinstance(optimizer, AcceleratedOptimizer)
    param.grad = torch.full((4,), 8.0)
    optimizer.clip_scale = torch.tensor(4.0)
    optimizer.step()
    assert torch.equal(param.grad, torch.full((4,), 2.0))  # divided, and written back: what a callback reads
    assert optimizer.clip_scale is None and not hasattr(optimizer.optimizer, "grad_scale")
    param.grad = torch.full((4,), 8.0)
    optimizer.step()
    assert torch.equal(param.grad, torch.full((4,), 8.0))  # the next step is a plain one


@pytest.mark.usefixtures("cpu_only")
def test_a_step_that_fails_leaves_no_grad_scale_behind():
    acc = Accelerator(cpu=True)
    param = torch.nn.Parameter(torch.ones(4))
    optimizer = acc.prepare(torch.optim.AdamW([param], lr=0.1, fused=True))
    param.grad = torch.ones(4)
    optimizer.clip_scale = torch.tensor(2.0)

    def closure():
        raise ValueError("the loss could not be computed")

    with pytest.raises(ValueError):
        optimizer.step(closure)
    assert optimizer.clip_scale is None and not hasattr(optimizer.optimizer, "grad_scale")


@pytest.mark.usefixtures("cpu_only")
@pytest.mark.parametrize("regional", [False, True])
def test_trains_compiled_follows_compiling_and_going_back_to_eager(regional):
    """What decides the fold: compiled whole or by regions, and no longer once the Trainer goes back to eager."""
    from braeburn.plan.compile_policy import CompileDecision

    acc = Accelerator(cpu=True, compile_backend="eager")
    blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])
    model = acc.prepare(torch.nn.Sequential(*blocks) if not regional else _Blocks(blocks))
    assert not acc.trains_compiled(model)
    model = acc.compile_model(model, CompileDecision(True, "asked", regional=regional))
    assert acc.trains_compiled(model)
    model = acc.uncompile_model(model)
    assert not acc.trains_compiled(model)
    assert acc.trains_compiled(torch.compile(torch.nn.Linear(2, 2), backend="eager"))  # a model the user compiled


class _Blocks(torch.nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = blocks

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
