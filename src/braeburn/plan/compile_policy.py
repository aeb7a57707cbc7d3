"""When torch.compile pays off, and a prepared model's forward that never recompiles because of braeburn.

Two pieces:

- :func:`decide` is the rule for ``compile="auto"``, a pure function of what is known about the
  run: the device's default, the model kind, the processes, and (in the Trainer) the measured
  eager step time times the steps still to go, times the share compiling is expected to save,
  against what compiling is expected to cost. Both expectations come from
  :mod:`braeburn.plan.compile_gains` (this machine's record of the same model, its family's measured
  numbers, or a default), and the saving must exceed the cost by a margin that grows the less is
  known.
- :class:`PreparedForward` is the forward a prepared model runs: autocast, float32 outputs, and,
  once compiling is switched on, the compiled graph for training batches of the size it was
  compiled for. Everything else runs eagerly: the short last batch of an epoch, evaluation and
  prediction (no grad), a model switched to ``eval()``. Moving batches and converting outputs
  stay outside the compiled region. So none of the Trainer's or Accelerator's own steps (a
  short batch, a save, an evaluation) makes torch recompile; padding text to a few lengths
  (``braeburn.data.collate``) and compiling with dynamic sequence lengths covers new lengths.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .compile_gains import DEFAULT_GAIN, CompileEstimate
from ..data.loader import apply_to_tensors

_NO_CONTEXT = contextlib.nullcontext()  # reusable

DEFAULT_ESTIMATE = CompileEstimate(DEFAULT_GAIN.gain, DEFAULT_GAIN.cold_seconds, "default",
                                   "assuming 30% saved and about 45 s to compile")
MIN_EAGER_SECONDS = DEFAULT_ESTIMATE.payback * DEFAULT_ESTIMATE.compile_seconds / DEFAULT_ESTIMATE.gain
"""Eager training time still ahead above which ``compile="auto"`` compiles a model nothing is known about (300 s)."""


@dataclass(frozen=True)
class CompileDecision:
    compile: bool
    reason: str
    dynamic: bool | None = None  # torch.compile(dynamic=...): True when the input shapes vary
    needs_timing: bool = False  # "auto" could compile here, given the eager step time and the steps to go
    regional: bool = False  # compile the repeated blocks and the loss as regions, not the whole forward


def decide(*, requested: bool | str, device_compiles: bool, device_reason: str, convolutional: bool,
           num_processes: int, remaining_steps: int | None = None, eager_step_seconds: float | None = None,
           shapes_vary: bool = False, estimate: CompileEstimate | None = None,
           requested_reason: str = "") -> CompileDecision:
    """Whether to compile this run's model, and why. ``requested``: True, False, "regional" or "auto"; ``estimate``: the
    expected gain and compile cost (:func:`braeburn.plan.compile_gains.estimate`; a default when None);
    ``requested_reason``: why compile is True or False (the plan's: "as asked", or a default a caller chose)."""
    dynamic = True if shapes_vary else None
    if requested is True:
        return CompileDecision(True, requested_reason or "compile=true, as asked", dynamic)
    if requested == "regional":
        return CompileDecision(True, requested_reason or "compile=regional, as asked", dynamic, regional=True)
    if requested is False:
        return CompileDecision(False, requested_reason or "compile=false, as asked")
    if not device_compiles:
        return CompileDecision(False, f"auto: {device_reason}")
    if convolutional:
        return CompileDecision(False, "auto: a CNN stays eager (compiling ResNet-50 made it 28% slower on an H200)")
    if num_processes > 1:
        return CompileDecision(False, "auto: several processes stay eager (compile them with --compile true)")
    if remaining_steps is None or eager_step_seconds is None:
        return CompileDecision(False, "auto: the run's length is not known here, and compiling costs tens of "
                                      "seconds that a short run never earns back (pass compile=True for long runs)",
                               needs_timing=True)
    expected = estimate or DEFAULT_ESTIMATE
    ahead = remaining_steps * eager_step_seconds
    choice = choose_compile(ahead, whole=expected, regional=expected.regional)
    saving = ahead * expected.gain
    numbers = (f"{eager_step_seconds * 1000:.1f} ms/step eager x {remaining_steps} steps to go = {ahead:.0f} s; "
               f"{expected.words}: saves about {saving:.0f} s against {expected.compile_seconds:.0f} s of compiling")
    if expected.regional is not None:
        regional = expected.regional
        numbers += (f"; {regional.words}: saves about {ahead * regional.gain:.0f} s against "
                    f"{regional.compile_seconds:.0f} s")
    if choice is None:
        return CompileDecision(False, f"auto: {numbers}, short of the {expected.payback:g}x margin: staying eager "
                                      "(--compile true forces it)")
    if choice == "regional":
        return CompileDecision(True, f"auto: {numbers}; by regions is the fastest for this run's length, at least "
                                     f"{expected.regional.payback:g}x: compiling by regions", dynamic, regional=True)
    return CompileDecision(True, f"auto: {numbers}, at least {expected.payback:g}x: compiling", dynamic)


def expected_seconds(ahead: float, option: CompileEstimate | None) -> float:
    """The run's expected time from here: eager (``option`` None), or compiled that way (its cost, then the rest of
    the eager time ``ahead`` less the share it saves)."""
    return ahead if option is None else option.compile_seconds + ahead * (1.0 - option.gain)


def choose_compile(ahead: float, whole: CompileEstimate, regional: CompileEstimate | None = None) -> str | None:
    """The expected-gain rule for ``compile="auto"``, a pure function: "whole", "regional" or None (eager), given
    the eager training time still ``ahead`` (seconds) and each way of compiling's expected gain and cost.

    A way of compiling qualifies when what it saves is at least its margin (``payback``) times what it costs, the
    margin larger the less is known; of those that qualify, the one with the shortest expected time for the rest of
    the run wins. With no regional estimate this is the whole-model rule alone."""
    options = {"whole": whole, "regional": regional}
    qualified = {name: option for name, option in options.items()
                 if option is not None and ahead * option.gain >= option.payback * option.compile_seconds}
    if not qualified:
        return None
    return min(qualified, key=lambda name: (expected_seconds(ahead, qualified[name]), name != "whole"))


SLOWER_MARGIN = 0.10


def measurably_slower(eager: list[float], compiled: list[float]) -> bool:
    """Whether compiled steps (seconds each) are slower than eager ones beyond the noise: the median compiled step
    more than SLOWER_MARGIN over the median eager one, and even the fastest compiled step over that median."""
    if not eager or not compiled:
        return False
    typical = statistics.median(eager)
    return statistics.median(compiled) > typical * (1 + SLOWER_MARGIN) and min(compiled) > typical


# -- what would break the graph ------------------------------------------------------------------
# torch.compile modes that capture CUDA graphs: a graph's outputs live in its memory pool, and the next replay
# overwrites them, so whatever is kept across steps must be copied out first.
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def outputs_are_overwritten(mode: str | None) -> bool:
    """Whether a model compiled in this mode returns tensors that its next call overwrites (CUDA graphs)."""
    return mode in CUDA_GRAPH_MODES


GRAPH_CAPTURE_OPTION = "triton.cudagraphs"  # the inductor option that those modes turn on (or a user's options=)


def model_outputs_are_overwritten(model: torch.nn.Module) -> bool:
    """Whether ``model`` (or the model inside its DDP or torch.compile wrappers) was compiled by torch.compile with
    CUDA graphs by its user: ``torch.compile(model, mode="reduce-overhead")``, ``model.compile(mode=...)`` or the
    option itself. Its next call overwrites the outputs of this one, as with :data:`CUDA_GRAPH_MODES` here."""
    seen: set[int] = set()
    while isinstance(model, torch.nn.Module) and id(model) not in seen:
        seen.add(id(model))
        for compiled in (model, getattr(model, "_compiled_call_impl", None)):
            config = getattr(compiled, "get_compiler_config", None)
            if callable(config) and (config() or {}).get(GRAPH_CAPTURE_OPTION):
                return True
        model = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
    return False


def pin_traced_attributes(module: torch.nn.Module) -> None:
    """Resolve, once and eagerly, what a model looks up on every forward through code Dynamo cannot trace.

    Transformers' ``loss_function`` property logs a warning on every access when the model's class name
    names no loss (``GPT2LMHeadModel`` and the other ``...LMHeadModel`` classes): under torch.compile that
    logging call is a graph break in every training forward (the forward becomes two graphs, and the
    logits leave the first one). Transformers' own setter pins the same loss function, so the forward
    computes exactly what it did, without the break. Only the outermost such models are pinned: a base
    model inside one (``BertModel`` in ``BertForSequenceClassification``) never looks its loss up, and looking
    it up here would only print Transformers' "Using the default loss: ForCausalLMLoss" for a model that has
    none. Called only when a model is compiled.
    """
    pinned: list[str] = []
    for name, submodule in module.named_modules():
        attribute = getattr(type(submodule), "loss_function", None)
        if not (isinstance(attribute, property) and attribute.fset is not None):
            continue
        if any(outer == "" or name.startswith(outer + ".") for outer in pinned):
            continue  # inside a model pinned already
        pinned.append(name)
        if "_loss_function" in vars(submodule):
            continue
        try:
            submodule.loss_function = submodule.loss_function
        except Exception:  # a model whose loss lookup fails here fails the same way in its forward
            pass


# -- the prepared forward -------------------------------------------------------------------------
def _dynamo_counters():
    try:
        from torch._dynamo.utils import counters
    except Exception:  # torch without Dynamo
        return None
    return counters


def _graph_count() -> int | None:
    """Graphs Dynamo has compiled in this process (torch's own counter; None where torch has none)."""
    counters = _dynamo_counters()
    return None if counters is None else int(counters["stats"]["unique_graphs"])


def _graph_break_reasons() -> set[str]:
    """The distinct reasons of the graph breaks Dynamo has met in this process (their first lines)."""
    counters = _dynamo_counters()
    return set() if counters is None else {reason.split("\n")[0] for reason in counters["graph_break"]}


def _leading_size(args: tuple, kwargs: dict) -> int | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim():
            return int(value.shape[0])
    return None


def _to_float32(output: Any) -> Any:
    return apply_to_tensors(lambda t: t.float() if t.dtype in (torch.float16, torch.bfloat16) else t, output)


@dataclass
class CompileStats:
    """What compiling did, for the end-of-run summary and metrics.jsonl."""

    compiled: bool = False
    reason: str = ""
    dynamic: bool | None = None
    batch_size: int | None = None  # the training batch size the compiled graph serves
    compile_seconds: float = 0.0  # wall time of the first compiled call (tracing and code generation)
    graphs: int | None = 0  # graphs compiled for this model
    compiled_calls: int = 0
    eager_calls: int = 0  # calls run eagerly after compiling (short batches, evaluation)
    over_wrapper: bool = False  # compiled as torch.compile(DDP/FSDP model): no per-call report
    regional: bool = False  # compiled by regions (the repeated blocks and the loss), not as a whole
    regions: int = 1  # the graphs a compile without any recompilation makes: 1 whole, or one per region
    decided_at_step: int | None = None
    eager_step_seconds: float | None = None
    graph_breaks: list[str] = field(default_factory=list)  # distinct reasons, first lines
    _graphs_before: int | None = field(default=None, repr=False)
    _breaks_before: set[str] = field(default_factory=set, repr=False)

    @property
    def recompiles(self) -> int | None:
        """Graphs beyond the first (of each region); not counted where graph breaks split the forward into several
        graphs."""
        return None if self.graphs is None or self.graph_breaks else max(0, self.graphs - self.regions)

    def as_dict(self) -> dict[str, Any]:
        return {"compiled": self.compiled, "reason": self.reason, "dynamic": self.dynamic,
                "compile_seconds": round(self.compile_seconds, 3), "graphs": self.graphs,
                "recompiles": self.recompiles, "compiled_calls": self.compiled_calls,
                "eager_calls_after_compile": self.eager_calls, "decided_at_step": self.decided_at_step,
                "eager_step_seconds": self.eager_step_seconds, "graph_breaks": self.graph_breaks,
                "regional": self.regional}


class PreparedForward:
    """Installed as a prepared module's ``forward``: autocast, float32 outputs, and the compiled path."""

    def __init__(self, module: torch.nn.Module, autocast: Callable[[], Any] | None, synchronize: Callable[[], None]):
        self.original = module.forward
        self.module_training = lambda: module.training
        self.autocast = autocast
        self.synchronize = synchronize
        self.compiled: Callable | None = None
        self.around: Any = None  # a reusable context entered around each eager call (the device's, if it has one)
        self.around_compiled: Any = None  # the same for each compiled call
        self.float_outputs = True  # the Trainer turns this off around training forwards whose loss the model computes
        self.stats = CompileStats()
        functools.update_wrapper(self, self.original)

    def enable_compile(self, decision: CompileDecision, backend: str = "inductor", mode: str | None = None) -> None:
        """The compiled path for training calls: torch.compile of the whole forward, or, for a regional decision
        (its regions compiled in place beforehand: braeburn.accelerator.compile.compile_regions), the forward as it
        is, whose blocks now run compiled."""
        self.stats.compiled, self.stats.reason, self.stats.dynamic = True, decision.reason, decision.dynamic
        self.stats.regional = decision.regional
        self.compiled = self.original if decision.regional else torch.compile(
            self.original, backend=backend, mode=mode, dynamic=decision.dynamic)

    def disable_compile(self) -> None:
        """Every call eager from now on (the stats keep what compiling did)."""
        self.compiled = None

    def _use_compiled(self, args: tuple, kwargs: dict) -> bool:
        if self.compiled is None or not torch.is_grad_enabled() or not self.module_training():
            return False
        size = _leading_size(args, kwargs)
        if self.stats.batch_size is None:
            self.stats.batch_size = size
        return size == self.stats.batch_size

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.compiled is None:
            if self.around is None and self.autocast is None:  # float32, eager: the module's own forward, as is
                return self.original(*args, **kwargs)
            return self._eager(args, kwargs)
        if not self._use_compiled(args, kwargs):
            self.stats.eager_calls += 1
            return self._eager(args, kwargs)
        self.stats.compiled_calls += 1
        with self.around_compiled or _NO_CONTEXT:
            if self.stats.compiled_calls == 1:
                return self._first_compiled_call(args, kwargs)
            output = self._run(self.compiled, args, kwargs)
        self._count_graphs()
        return output

    def _first_compiled_call(self, args: tuple, kwargs: dict) -> Any:
        self.stats._graphs_before, self.stats._breaks_before = _graph_count(), _graph_break_reasons()
        started = time.perf_counter()
        output = self._run(self.compiled, args, kwargs)
        self.synchronize()  # once: the compile time is what the user waited for
        self.stats.compile_seconds = time.perf_counter() - started
        self._count_graphs()
        return output

    def _count_graphs(self) -> None:
        before = self.stats._graphs_before
        graphs = None if before is None else (_graph_count() or 0) - before
        if graphs != self.stats.graphs:  # a break shows up only with a new graph: nothing to read on other steps
            self.stats.graph_breaks = sorted(_graph_break_reasons() - self.stats._breaks_before)
        self.stats.graphs = graphs

    def _eager(self, args: tuple, kwargs: dict) -> Any:
        if self.around is None:
            return self._run(self.original, args, kwargs)
        with self.around:
            return self._run(self.original, args, kwargs)

    def _run(self, function: Callable, args: tuple, kwargs: dict) -> Any:
        if self.autocast is None:
            return function(*args, **kwargs)
        with self.autocast():
            output = function(*args, **kwargs)
        return _to_float32(output) if self.float_outputs else output


def prepared_forward(module: torch.nn.Module) -> PreparedForward | None:
    forward = module.__dict__.get("forward")
    return forward if isinstance(forward, PreparedForward) else None


def install_forward(module: torch.nn.Module, autocast: Callable[[], Any] | None,
                    synchronize: Callable[[], None]) -> PreparedForward:
    """Give ``module`` a :class:`PreparedForward` (once; a module prepared twice keeps the first)."""
    existing = prepared_forward(module)
    if existing is not None:
        return existing
    forward = PreparedForward(module, autocast, synchronize)
    module.forward = forward
    return forward


__all__ = ["CompileDecision", "CompileStats", "DEFAULT_ESTIMATE", "choose_compile", "expected_seconds", "MIN_EAGER_SECONDS", "PreparedForward", "decide",
           "install_forward", "measurably_slower", "prepared_forward"]
