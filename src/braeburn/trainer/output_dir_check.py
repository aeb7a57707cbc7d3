"""The output folder before the first step: braeburn starts only where it writes over nothing it did not write.

An output folder may be one that braeburn did not make: a project (``--output_dir .``), a home folder, a data
folder. braeburn trains there as long as the names it writes are free or its own (:mod:`braeburn.checkpoints.ownership`):

- the names the run writes itself: ``metrics.jsonl``, ``training_curves.png``, TensorBoard's folder (when it
  lies in output_dir), ``checkpoint-<step>`` folders, and braeburn's record ``.braeburn-files.json``;
- the names of the final model that the Trainer's ``save_model()`` writes into output_dir (its
  ``_final_model_names()``: for ``braeburn.Trainer``, ``model.safetensors``, ``training_args.bin``, a Transformers
  model's ``config.json``, the tokenizer's files).

Any of them held by something braeburn did not write refuses the run at once, in one line naming it, why
it is not braeburn's, and the fix, before anything is written or moved; so does, on a resume or with
``overwrite_output_dir``, a ``metrics.jsonl`` that another name shares (a hard link: the appended records would
change the file under that name too). Then, on a rerun (neither
``--resume_from_checkpoint`` nor ``--overwrite_output_dir``), braeburn's files of the earlier run are set
aside (:mod:`.earlier_run`), and the names this run writes are recorded as braeburn's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..checkpoints import no_follow, output_lock, ownership
from ..checkpoints.output_lock import LOCK_FILE
from ..distributed import process_group as pg
from . import earlier_run
from .checkpoint import CHECKPOINT_RE, STAGING_RE, CheckpointManager
from .metrics_log import METRICS_FILE
from .plots import PLOT_FILE
from .write_faults import prepare_output_dir

if TYPE_CHECKING:
    from .loop import CoreTrainer as Trainer

def _top_name(folder: Path, path: Path) -> str | None:
    """The entry of ``folder`` that ``path`` lies in, or None when it lies outside."""
    path = path.resolve()
    return path.relative_to(folder).parts[0] if path != folder and path.is_relative_to(folder) else None


def run_names(trainer: "Trainer") -> dict[str, str]:
    """The entries of output_dir that ``train()`` writes itself (checkpoints aside), with what it writes there."""
    out, log = trainer.output_dir, trainer._metrics_log
    names = {METRICS_FILE: "this run appends its metrics log to it"}
    if trainer._plot.left_alone is None:
        names[PLOT_FILE] = "this run draws its training curves there (it is replaced at the end)"
    if log.tensorboard:
        board = _top_name(out, Path(log.tensorboard_dir or out / log.default_dir).expanduser())
        if board is not None:
            names[board] = "this run writes TensorBoard's event files into it (--logging_dir chooses another folder)"
    return names


def checked_names(trainer: "Trainer") -> dict[str, str]:
    """Every name of output_dir that this run writes, or that its save_model() writes, with what is written there,
    in the order a refusal names them."""
    out = trainer.output_dir
    final = trainer._final_model_names()
    names = {ownership.MARKER: "braeburn keeps its record of the files it wrote there", **run_names(trainer)}
    for entry in out.iterdir() if out.is_dir() else ():
        if CHECKPOINT_RE.match(entry.name):
            names[entry.name] = "this run saves checkpoint-<step> folders, and a save of that step replaces it"
        elif STAGING_RE.match(entry.name):
            names[entry.name] = "a checkpoint save of that step writes its files there before renaming them"
    for name in final:  # (after the others: a name the run writes itself is named for that)
        names.setdefault(name.split("/")[0], "trainer.save_model() writes the final model there (into output_dir, "
                         "unless given another folder)")
    return names


def ready(trainer: "Trainer", set_aside: bool, say: Callable[[str], None]) -> None:
    """Refuse output_dir when the run would write over an entry braeburn did not write; else set the earlier run
    aside (when ``set_aside``) and record the names this run writes. The main process only."""
    out = trainer.output_dir
    prepare_output_dir(out)  # a read-only parent or disk: one clear error now, not a traceback later
    proven = ownership.unrecorded_run(out)  # a run of a braeburn from before the record: what it proves
    needs = checked_names(trainer)
    clashes = ownership.foreign(out, needs, proven)
    if proven and PLOT_FILE in clashes:  # its curves cannot be proven braeburn's: left as they are, not redrawn
        trainer._plot.leave_alone(out / PLOT_FILE, clashes.pop(PLOT_FILE))
        needs.pop(PLOT_FILE)
    if clashes:  # every one, in the order: the record, what train() writes, the final model's names
        raise ownership.refusal_of_all(out, clashes, needs)
    if proven:
        ownership.adopt(out, proven)
        say(f"braeburn: {out} holds a run of a braeburn from before its record of files ({ownership.MARKER}); its "
            f"manifests and metrics log prove {', '.join(sorted(proven))} braeburn's: recorded as such")
    if not set_aside:  # the run appends to its log as it is (a rerun sets it aside first)
        no_follow.check_unshared(out / METRICS_FILE)
    trainer.checkpoints.clean_staging()  # what a killed save of braeburn's left (its record names it)
    if ownership.owns(out, ownership.STAGING):  # what a killed save_model() left (its record names it)
        no_follow.remove_tree(out / ownership.STAGING)
        ownership.forget(out, [ownership.STAGING])
    ownership.prune(out)
    if set_aside:
        entries = ownership.movable(out)
        if entries:
            target = earlier_run.set_aside(out, entries)
            braeburns = {*ownership.set_aside_folders(out), ownership.MARKER, LOCK_FILE}
            left = sum(1 for p in out.iterdir() if p.name not in braeburns)
            say(earlier_run.note(out, target, list(entries), CheckpointManager(target).latest(), left))
    ownership.claim(out, {name: ownership.FOLDER if name not in (METRICS_FILE, PLOT_FILE) else ownership.FILE
                          for name in run_names(trainer)})


__all__ = ["checked_names", "ready", "run_names"]


def lock(trainer: "Trainer") -> None:
    """Rank 0 holds output_dir's lock for the run (one writer); every rank learns if it was refused."""
    refusal: Exception | None = None
    if trainer.is_main_process:
        try:
            output_lock.acquire(trainer.output_dir)
        except (output_lock.OutputDirBusyError, output_lock.OutputLockUnsupportedError, OSError) as error:
            refusal = error  # raised after the other ranks heard of it, so that none waits forever
    if not pg.all_ok(refusal is None, trainer.accelerator.device):
        raise refusal or output_lock.OutputDirBusyError(
            f"output_dir={str(trainer.output_dir)!r} could not be locked by rank 0 (its error says why); this rank "
            "stops with it")
