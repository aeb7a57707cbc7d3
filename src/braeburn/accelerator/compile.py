"""The Accelerator's compile methods: whether to compile a prepared model (``compile_policy.decide`` with the gain
``compile_gains`` expects), compiling it in place, and what compiling did. A mixin of
:class:`braeburn.accelerator.core.Accelerator`; it uses the Accelerator's plan, models and processes.
"""

from __future__ import annotations

import torch

from . import checkpoint_replay
from ..plan import compile_gains, compile_policy
from ..devices.host import current_host


def mostly_convolutions(model: torch.nn.Module) -> bool:
    """True when 2-D convolutions hold most of the parameters (a CNN rather than a transformer)."""
    conv = sum(p.numel() for m in model.modules() if isinstance(m, torch.nn.Conv2d) for p in m.parameters(False))
    total = sum(p.numel() for p in model.parameters())
    return total > 0 and conv * 2 > total


class CompileMixin:
    """compile_decision(), compile_model(), compile_stats() and what they need."""

    def compile_decision(self, model: torch.nn.Module, remaining_steps: int | None = None,
                         eager_step_seconds: float | None = None, shapes_vary: bool = False,
                         batch_size: int | None = None):
        """Whether to compile ``model`` (see :func:`braeburn.plan.compile_policy.decide`): compile=true or false as
        asked; "auto" compiles only where the device gains from it and the eager time still ahead (known to
        the Trainer, which measures it) times the gain expected for this model earns the compile back."""
        plan = self.plan
        requested = "auto" if plan.compile_auto else ("regional" if plan.compile_regional else plan.compile)
        if requested == "auto" and plan.compile and self._replays_checkpointing(model):  # the device would compile
            return compile_policy.CompileDecision(False, f"auto: gradient checkpointing on {plan.device.name} replays "
                                                  "its random state in Python that torch.compile cannot trace")
        estimate = None
        if eager_step_seconds is not None:
            unwrapped = self.unwrap_model(model)
            estimate = compile_gains.estimate(unwrapped, self.compile_key(unwrapped, batch_size),
                                              compile_gains.read_records())
        return compile_policy.decide(
            requested=requested, device_compiles=plan.compile, device_reason=plan.compile_reason,
            convolutional=mostly_convolutions(self.unwrap_model(model)), num_processes=self.num_processes,
            remaining_steps=remaining_steps, eager_step_seconds=eager_step_seconds, shapes_vary=shapes_vary,
            estimate=estimate, requested_reason="" if plan.compile_auto else plan.compile_reason)

    def _replays_checkpointing(self, model: torch.nn.Module) -> bool:
        return (not self.plan.device.checkpoint_replays_rng(current_host())
                and bool(checkpoint_replay.checkpointed_layers(self.unwrap_model(model))))

    def _replay_checkpointing(self, model: torch.nn.Module) -> None:
        """Layers that checkpoint on their own replay the device's random state where torch does not; compile=True
        with them is refused here, before training (braeburn.accelerator.checkpoint_replay)."""
        kind = self.plan.device
        if not kind.checkpoint_replays_rng(current_host()):
            checkpoint_replay.prepare_model(model, kind, self.plan.compile and not self.plan.compile_auto)

    def compile_key(self, model: torch.nn.Module, batch_size: int | None) -> str:
        """What makes another run's compile of ``model`` comparable to this one's (braeburn.plan.compile_gains)."""
        return compile_gains.model_key(self.unwrap_model(model), device=self.plan.device.describe(current_host()),
                                       precision=self.precision, batch_size=batch_size,
                                       torch_version=torch.__version__)

    def compile_model(self, model: torch.nn.Module, decision) -> torch.nn.Module:
        """Switch a prepared model to its compiled forward now (the Trainer calls this once it has measured
        the eager steps); returns the model to call from now on."""
        forward = compile_policy.prepared_forward(self.unwrap_model(model))
        compiled = self._compile(model, forward, decision)
        self._models = [compiled if m is model else m for m in self._models]
        return compiled

    def uncompile_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Train ``model`` eagerly again after :meth:`compile_model` (the Trainer, where compiled steps measured
        slower); returns the model to call from now on."""
        forward = compile_policy.prepared_forward(self.unwrap_model(model))
        if forward is not None and not forward.stats.over_wrapper:
            if forward.stats.regional:
                uncompile_regions(self.unwrap_model(model))
            forward.disable_compile()
            return model
        eager = getattr(model, "_orig_mod", model)  # torch.compile's OptimizedModule over a DDP/FSDP wrapper
        self._models = [eager if m is model else m for m in self._models]
        return eager

    def _compile(self, model: torch.nn.Module, forward, decision) -> torch.nn.Module:
        compile_policy.pin_traced_attributes(self.unwrap_model(model))
        if self.num_processes > 1 or forward is None:
            # DDP/FSDP: torch.compile over the wrapper, so Dynamo's DDP optimizer splits the graph at the
            # gradient buckets and the all-reduce still overlaps the backward.
            reason = decision.reason + (" (several processes: compiled whole, over the wrapper)" if decision.regional
                                        else "")
            if forward is not None:
                forward.stats.compiled, forward.stats.reason, forward.stats.over_wrapper = True, reason, True
            return torch.compile(model, backend=self.compile_backend, mode=self.compile_mode)
        regions = compile_regions(self.unwrap_model(model), self.compile_backend, self.compile_mode,
                                  decision.dynamic) if decision.regional else 1
        if not regions:
            decision = compile_policy.CompileDecision(True, decision.reason + " (no repeated blocks: compiled whole)",
                                                      decision.dynamic)
        forward.enable_compile(decision, self.compile_backend, self.compile_mode)
        forward.stats.regions = max(regions, 1)  # the blocks (one graph for all) and the loss: no recompilation
        return model  # the same module: only training batches of the compiled size take the compiled path

    def trains_compiled(self, model: torch.nn.Module) -> bool:
        """Whether ``model``'s training forward runs compiled now: compiled whole or by regions (and not back to
        eager since), or wrapped by torch.compile (over DDP/FSDP, or by the user)."""
        if getattr(model, "_orig_mod", None) is not None:
            return True
        forward = compile_policy.prepared_forward(self.unwrap_model(model))
        return forward is not None and forward.compiled is not None

    def compile_stats(self, model: torch.nn.Module | None = None):
        """What compiling did for ``model`` (the first prepared model by default): a CompileStats or None."""
        model = model if model is not None else (self._models[0] if self._models else None)
        forward = compile_policy.prepared_forward(self.unwrap_model(model)) if model is not None else None
        return forward.stats if forward is not None else None


def repeated_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated layers: the blocks of its largest ``ModuleList`` (by parameters) whose modules are all
    of one class, at least two of them (a transformer's layers); none when it has no such list."""
    best: list[torch.nn.Module] = []
    best_size = 0
    for module in model.modules():
        if not isinstance(module, torch.nn.ModuleList) or len(module) < 2:
            continue
        blocks = list(module)
        if len({type(block) for block in blocks}) != 1:
            continue
        size = sum(p.numel() for p in module.parameters())
        if size > best_size:
            best, best_size = blocks, size
    return best


def compile_regions(model: torch.nn.Module, backend: str = "inductor", mode: str | None = None,
                    dynamic: bool | None = None) -> int:
    """Regional compilation, in place: each repeated block (:func:`repeated_blocks`) compiled on its own, so the
    blocks share one compiled graph (torch compiles identical blocks once), and a Transformers model's loss function
    as one more region (the logits' cast and the cross-entropy fused); the rest runs eagerly. Returns the regions
    compiled (0: the model has no repeated blocks, and nothing was compiled)."""
    blocks = repeated_blocks(model)
    if not blocks:
        return 0
    for block in blocks:
        block.compile(backend=backend, mode=mode, dynamic=dynamic)
    regions = 1
    loss = vars(model).get("_loss_function")  # pinned by compile_policy.pin_traced_attributes
    if callable(loss):
        model.loss_function = torch.compile(loss, backend=backend, mode=mode, dynamic=dynamic)
        regions += 1
    return regions


def uncompile_regions(model: torch.nn.Module) -> None:
    """Undo :func:`compile_regions`: the blocks and the loss function run eagerly again."""
    for block in repeated_blocks(model):
        block._compiled_call_impl = None  # what nn.Module.compile() set; __call__ then runs the module eagerly
    loss = vars(model).get("_loss_function")
    original = getattr(loss, "_torchdynamo_orig_callable", None)
    if original is not None:
        model.loss_function = original
