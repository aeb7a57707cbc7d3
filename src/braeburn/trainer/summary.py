"""What train() says at its end (the summary) and when a loss stops being finite: read-only views of a Trainer,
kept beside the loop so that loop.py stays the loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..plan.option_spelling import advice, option, shown
from .progress import memory_line

if TYPE_CHECKING:
    from .loop import CoreTrainer as Trainer


def non_finite_message(trainer: "Trainer", step: int, value: float) -> str:
    """The NaN/inf stop's message: where the run stopped, the last good checkpoint of THIS run, and the fixes."""
    trainer._saver.wait()  # a checkpoint still being written is the last good one
    last = trainer.checkpoints.latest(trainer.state.run_id) if trainer.is_main_process else None  # never another run's
    where = (f"Resume from the last good checkpoint ({last}) with {option('resume_from_checkpoint', last)}"
             if last else "No checkpoint was saved before it, so train again")
    return (f"The training loss became {value} at step {step} (epoch {trainer.state.epoch:.2f}); training stopped, "
            f"and the weights after that step cannot be trusted. {where} after lowering {option('learning_rate')}, "
            f"setting {option('max_grad_norm', 1.0)}, or trying {option('mixed_precision', 'no')}."
            + advice(" To skip such steps instead, pass {}.", "nan_policy", "skip"))

def _ending(trainer: "Trainer") -> str:
    """Why a run that nothing stopped ended: its max_steps, or its epochs (max_steps is derived from them)."""
    state = trainer.state
    if state.global_step < state.max_steps:
        return "done"
    if trainer.config.max_steps > 0:
        return "max_steps reached"
    return f"{state.num_epochs} epoch{'s' if state.num_epochs != 1 else ''} done"


def run_summary(trainer: "Trainer", seconds: float, steps: int, samples: int) -> str:
    """The end-of-train() summary: why it ended, device, precision, steps, speed (``samples`` trained in ``seconds``),
    memory, compile, evals, output."""
    acc, state, plan = trainer.accelerator, trainer.state, trainer.accelerator.plan
    memory = memory_line(acc.memory_stats())
    evals = ", ".join(f"{k} {v:.4g}" for k, v in trainer._last_eval_metrics().items()
                      if not k.endswith(("_runtime", "_per_second"))) or "none"
    fallback = ", ".join(f"{op} x{count}" for op, count in acc.fallback_report()) or "none"
    compiled = trainer._compile_window.summary(len(trainer._shapes), trainer._pads_to_buckets and _padded_text(trainer._shapes))
    compiled += trainer._step_breakdown.summary(acc.num_processes)
    ending = state.stop_reason or _ending(trainer)
    return "\n".join([
        f"braeburn: training ended ({ending}) after {seconds:.1f} s",
        f"  device     {acc.device} ({plan.device_reason})",
        f"  precision  {shown('mixed_precision', plan.precision)} ({plan.precision_reason})",
        f"  steps      {state.global_step}/{state.max_steps} optimizer steps ({steps} in this run), "
        f"epoch {state.epoch_progress:.2f}",
        f"  speed      {samples / seconds if seconds > 0 else 0:.1f} samples/s",
        trainer._phases.line(seconds, steps, trainer._compile_window.compile_seconds()),
        f"  {memory}",
        *compiled,
        f"  last eval  {evals}",
        f"  CPU fallback ops  {fallback}",
        f"  output     {trainer.output_dir}",
        *filter(None, [trainer._save_log.summary_line(state.last_checkpoint)])])


def _padded_text(signatures: set[tuple]) -> bool:
    """Whether the training batches were text that bucket padding pads (a mapping with input_ids)."""
    return any(item[:1] == ("input_ids",) for signature in signatures for item in signature)  # () for 0-d tensors
