"""Checkpoints that survive crashes: atomic writes, checksums, rotation and "latest" discovery.

A checkpoint is ``output_dir/checkpoint-<step>``: what ``Accelerator.save_state`` writes (the model's
``model.safetensors``, optimizer, scheduler, scaler, RNG states, dataloader positions), a Transformers
model's ``config.json`` (the folder then loads with ``from_pretrained``), ``trainer_state.json``, and last
``manifest.json`` with the size and sha256 of every file. It is assembled in a hidden staging folder
and renamed into place only when complete, so a kill during a save leaves the previous checkpoints
as they were. Nothing outside ``output_dir`` is ever written or deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..checkpoints import manifest as manifest_io
from ..checkpoints import ownership
from ..checkpoints.manifest import MANIFEST
from ..checkpoints.no_follow import create_new, remove_tree, remove_tree_quietly
from ..plan.option_spelling import given, option
from ..checkpoints.state import fsync_dir as _fsync_dir
from ..checkpoints.state import old_dir, staging_dir
from .state import STATE_FILE, TrainerState, TrainerStateError

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
REPLACED_RE = re.compile(r"^\.(checkpoint-\d+)\.tmp\.old$")  # a checkpoint being replaced by a save of its step
STAGING_RE = re.compile(r"^\.+checkpoint-\d+\.tmp")  # ours, and the Accelerator's staging around it


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used or written; the message names the file and what to do."""


class CheckpointCorruptError(CheckpointError):
    def __init__(self, message: str, path: Path, previous_good: Path | None):
        self.path, self.previous_good = path, previous_good
        super().__init__(message)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
        os.fsync(handle.fileno())  # the bytes we hash are on disk before the manifest names them
    return digest.hexdigest()


def write_manifest(folder: Path, step: int) -> Path:
    """The checkpoint's manifest: the Accelerator's (sizes, layout) with checksums and the step added."""
    written_sharded = (folder / manifest_io.SHARDED_METADATA).is_file()  # (a background save writes no manifest)
    try:
        layout = (manifest_io.read(folder) or {}).get("layout")
    except manifest_io.ManifestError:
        layout = None
    layout = layout or (manifest_io.SHARDED if written_sharded else manifest_io.WHOLE)
    names = list(manifest_io.listed_files(folder))
    sizes = {name: (folder / name).stat().st_size for name in names}
    digests = _checksums(folder, sorted(names, key=sizes.__getitem__, reverse=True))
    files = {name: {"size": sizes[name], "sha256": digests[name]} for name in names}
    return manifest_io.write(folder, {"format": 1, "step": step, "layout": layout, "files": files})


HASH_THREADS = 2  # files hashed at once: hashlib and the reads let other threads run, so the largest file's time counts


def _checksums(folder: Path, names: list[str]) -> dict[str, str]:
    """The sha256 of each file (the largest first), two at a time: a checkpoint's weights and its optimizer state
    are hashed side by side, which took a tenth of a second of each save's 0.26 s one after the other (135 MB)."""
    if len(names) < 2:
        return {name: _sha256(folder / name) for name in names}
    digests, futures = {}, {}
    with ThreadPoolExecutor(max_workers=HASH_THREADS, thread_name_prefix="braeburn-hash") as pool:
        for name in names:
            try:
                futures[name] = pool.submit(_sha256, folder / name)
            except RuntimeError:  # the interpreter is exiting (a background save it finishes): hashed on this thread
                digests[name] = _sha256(folder / name)
        digests.update((name, future.result()) for name, future in futures.items())
    return digests


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest when it is readable and every name in it stays inside ``folder``; else None."""
    try:
        data = manifest_io.read(folder)
    except manifest_io.ManifestError:
        return None
    if data is None or any(manifest_io.name_problem(folder, n, e) for n, e in data["files"].items()):
        return None
    return data


def step_of(folder: Path) -> int:
    replaced = REPLACED_RE.match(folder.name)
    match = CHECKPOINT_RE.match(replaced.group(1) if replaced else folder.name)
    return int(match.group(1)) if match else -1


def run_of(folder: Path) -> str | None:
    """The run id recorded in ``folder``'s trainer_state.json; None when it records none or cannot be read."""
    try:
        data = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    run = data.get("run_id") if isinstance(data, dict) else None
    return run if isinstance(run, str) else None


def written_by_transformers(folder: Path) -> bool:
    """A checkpoint folder of Transformers' Trainer: its ``trainer_state.json``, and none of the files every braeburn
    checkpoint holds (its manifest, the Accelerator's ``accelerator.pt``)."""
    return ((folder / STATE_FILE).is_file() and not os.path.lexists(folder / MANIFEST)
            and not os.path.lexists(folder / "accelerator.pt"))


def _misnamed(folder: Path) -> str | None:
    """Says so when a verified checkpoint's folder is named ``checkpoint-N`` for another step than it holds."""
    named, held = step_of(folder), TrainerState.load(folder).global_step
    if named < 0 or named == held:
        return None
    return f"{folder} holds step {held} (its trainer_state.json), but its name says step {named}"


def _save_names(target: Path) -> dict[str, str]:
    """The entries of output_dir that a save of ``target`` (``checkpoint-N``) makes: the checkpoint first, then
    the staging folders around it (ours, and the Accelerator's beside it), which exist only during the save."""
    staging = target.parent / f".{target.name}.tmp"
    names = [target.name, staging.name, f".{target.name}.tmp.old", staging_dir(staging).name, old_dir(staging).name]
    return {name: ownership.FOLDER for name in names}


def _barrier(accelerator: Any) -> None:
    wait = getattr(accelerator, "wait_for_everyone", None)  # anything with save_state will do in one process
    if wait is not None:
        wait()


def _set_aside_note(newest: Path, earlier: Path) -> str:
    return (f"'latest' resumes {newest} (step {step_of(newest)}), the newest checkpoint of the run in {newest.parent}; "
            f"an earlier run that went further, to step {step_of(earlier)}, was set aside in {earlier.parent.name}/ "
            f"when this one started afresh there. To continue that run instead: "
            f"{option('resume_from_checkpoint', str(earlier))}")


class SaveLog:
    """What the saves of one ``train()`` call did: the end-of-run summary and exit say it (a run whose last save
    failed has no checkpoint of its final weights, and must not end as if it had one)."""

    def __init__(self) -> None:
        self.attempted, self.written = 0, 0
        self.last_error: BaseException | None = None  # of the last save, when it failed

    def record(self, error: BaseException | None) -> None:
        self.attempted += 1
        self.written += error is None
        self.last_error = error

    def summary_line(self, last_checkpoint: str | None) -> str | None:
        """``checkpoint  <folder>``, or what failed; None when the run saved nothing (save_strategy="no")."""
        if not self.attempted:
            return None
        if self.last_error is None:
            return f"  checkpoint {last_checkpoint}"
        failed = self.attempted - self.written
        if not self.written:
            return f"  checkpoint NONE written: all {failed} saves of this run failed (the last: {self.last_error})"
        return (f"  checkpoint the final save failed ({failed} of {self.attempted} failed; the last: {self.last_error});"
                f" the newest checkpoint, {last_checkpoint}, does not hold the final weights")

    def failure(self, last_checkpoint: str | None, step: int,
                save_option: str = "save_state") -> CheckpointError | None:
        """The error that ends ``train()`` when its last save failed, or None. ``save_option``: the option (as
        option_spelling spells it) by which the caller's Trainer writes the model in memory."""
        if self.last_error is None:
            return None
        older = (f"the newest checkpoint, {last_checkpoint}, is older than the final weights" if self.written
                 or last_checkpoint else "no checkpoint of this run exists")
        return CheckpointError(
            f"Training ended at step {step}, but its checkpoint could not be written ({self.attempted - self.written} "
            f"of {self.attempted} saves failed), so {older}. The last error: {self.last_error} The trained model is "
            f"still in memory: in Python, {option(save_option)} writes it. Free disk space (or raise "
            f"the file-size limit) and resume with {option('resume_from_checkpoint')}, or train again.")


class CheckpointManager:
    """Writes, finds, verifies and rotates the checkpoints of one ``output_dir``."""

    def __init__(self, output_dir: str | os.PathLike, save_total_limit: int | None = None):
        self.output_dir = Path(output_dir).resolve()
        self.save_total_limit = save_total_limit

    # -- finding ---------------------------------------------------------------------------------
    def _own(self, path: Path) -> bool:
        """A ``checkpoint-N`` folder directly inside output_dir (not a link leading elsewhere)."""
        return (CHECKPOINT_RE.match(path.name) is not None and path.is_dir() and not path.is_symlink()
                and path.resolve().parent == self.output_dir)

    def _replaced(self) -> list[Path]:
        """``.checkpoint-N.tmp.old`` folders whose ``checkpoint-N`` is missing: a save of the same step was
        killed between its two renames, and this is the complete checkpoint of that step."""
        if not self.output_dir.is_dir():
            return []
        return [p for p in self.output_dir.iterdir() if (match := REPLACED_RE.match(p.name)) and p.is_dir()
                and not p.is_symlink() and not (self.output_dir / match.group(1)).exists()
                and (p / MANIFEST).is_file()]

    def checkpoints(self) -> list[Path]:
        """Every ``checkpoint-N`` folder with a manifest (or the kept copy of one being replaced), oldest first."""
        if not self.output_dir.is_dir():
            return []
        found = [p for p in self.output_dir.iterdir() if self._own(p) and (p / MANIFEST).is_file()]
        return sorted(found + self._replaced(), key=step_of)

    def is_complete(self, folder: Path) -> bool:
        """Quick check: a manifest, and every file it lists present with its size."""
        manifest = _read_manifest(folder)
        if manifest is None or not manifest["files"]:
            return False
        return all((folder / name).is_file() and (folder / name).stat().st_size == entry.get("size")
                   for name, entry in manifest["files"].items())

    def latest(self, run_id: str | None = None) -> Path | None:
        """The newest complete checkpoint, of run ``run_id`` when given (a quick check; :meth:`verify` does the
        checksums)."""
        found = self.checkpoints() if run_id is None else self.of_run(run_id)
        return next((p for p in reversed(found) if self.is_complete(p)), None)

    def of_run(self, run_id: str | None) -> list[Path]:
        """The checkpoints that run ``run_id`` wrote (None: those that record no run), oldest first."""
        return [p for p in self.checkpoints() if run_of(p) == run_id]

    def previous_good(self, folder: Path) -> Path | None:
        """The newest checkpoint of ``folder``'s run, older than it, whose checksums all match."""
        run = run_of(folder)
        for candidate in reversed(self.of_run(run)):
            if step_of(candidate) < step_of(folder) and self._problem(candidate) is None:
                return candidate
        return None

    # -- verifying -------------------------------------------------------------------------------
    def _problem(self, folder: Path) -> str | None:
        try:
            manifest = manifest_io.read(folder)
        except manifest_io.ManifestError:
            manifest = None
        if manifest is None:
            return f"{folder / MANIFEST} is missing or unreadable, so the checkpoint is incomplete"
        problem = manifest_io.problem(folder, manifest)  # names inside the folder, sizes, nothing unlisted
        if problem is not None:
            return problem
        for name, entry in manifest["files"].items():
            if _sha256(folder / name) != entry.get("sha256"):
                return f"{folder / name} is corrupted: its sha256 does not match the manifest"
        try:
            TrainerState.load(folder)
        except TrainerStateError as error:
            return str(error)
        return None

    def verify(self, folder: Path) -> None:
        """Raise :class:`CheckpointCorruptError` naming the bad file and the previous good checkpoint."""
        problem = self._problem(folder)
        if problem is None:
            return
        previous = self.previous_good(folder) if folder.resolve().parent == self.output_dir else None
        offer = (f"The previous good checkpoint is {previous}: resume from it with "
                 f"{option('resume_from_checkpoint', previous)}." if previous
                 else f"No earlier good checkpoint was found in {self.output_dir}.")
        raise CheckpointCorruptError(f"Checkpoint {folder} cannot be used: {problem}. {offer}", folder, previous)

    def resolve(self, request: str) -> tuple[Path, list[str]]:
        """The checkpoint to resume from for ``request`` (a path or "latest"), and warnings to show.

        "latest" passes over a newest checkpoint that fails its checksums (with a warning naming the
        bad file) to the newest good one; an explicit path that fails them is an error.
        """
        if request == "latest":
            found = self.checkpoints()
            warnings, newest = [], found[-1] if found else None
            earlier = self.set_aside_newest()
            if newest is None:
                offer = (f" The earlier run set aside in {earlier.parent.name}/ has {earlier.name}: resume it with "
                         f"{option('resume_from_checkpoint', str(earlier))}, or" if earlier else "")
                raise CheckpointError(f"{given('resume_from_checkpoint', 'latest')} but {self.output_dir} holds no "
                                      f"complete checkpoint-N folder.{offer} Train without "
                                      f"{option('resume_from_checkpoint')} to start afresh.")
            self._refuse_several_runs(found)
            if earlier is not None and step_of(earlier) > step_of(newest):
                warnings.append(_set_aside_note(newest, earlier))
            try:
                self.verify(newest)
            except CheckpointCorruptError as error:
                if error.previous_good is None:
                    raise
                warnings.append(f"{error} Using {error.previous_good}.")
                newest = error.previous_good
            misnamed = _misnamed(newest)
            if misnamed:  # "latest" is chosen by the names: a wrong name may hide the newest checkpoint
                raise CheckpointError(f"{given('resume_from_checkpoint', 'latest')} chose {misnamed}, and the "
                                      "latest checkpoint is chosen by the folder names, so it may not be the newest "
                                      "checkpoint. Rename the folder to the step it holds, or pass the folder you mean "
                                      f"to {option('resume_from_checkpoint')}.")
            return newest, warnings
        folder = Path(request).expanduser().resolve()
        if not folder.is_dir():
            raise CheckpointError(f"resume_from_checkpoint={request!r}: no such folder. Pass a checkpoint-N folder "
                                  f"or 'latest' (the last complete checkpoint in output_dir).")
        self.refuse_transformers_checkpoint(request)
        self.verify(folder)
        misnamed = _misnamed(folder)
        return folder, [f"{misnamed}: resuming at the step it holds. Rename it to match, so that 'latest' and "
                        "save_total_limit order it right."] if misnamed else []

    def refuse_transformers_checkpoint(self, request: str) -> None:
        """A resume from a checkpoint of Transformers' Trainer (a path, or "latest" in a folder where the newest
        checkpoint-N is one), refused in one line that says so and what to do, before anything else looks at the
        folder (the output folder's check would call its folders foreign, the manifest check incomplete)."""
        if request == "latest":
            found = [p for p in self.output_dir.glob("checkpoint-*") if CHECKPOINT_RE.match(p.name) and p.is_dir()]
            folder = max(found, key=step_of, default=None)
        else:
            folder = Path(request).expanduser().resolve()
        if folder is None or not folder.is_dir() or not written_by_transformers(folder):
            return
        elsewhere = " in another --output_dir" if folder.parent.resolve() == self.output_dir else ""
        raise CheckpointError(
            f"{folder} is a checkpoint of Transformers' Trainer ({STATE_FILE} without braeburn's {MANIFEST}), and "
            "braeburn cannot resume one: its optimizer, scheduler and random states are in Transformers' files. "
            "Resume it with Transformers' Trainer, or start a braeburn run from its weights "
            f"(from_pretrained({str(folder)!r}) builds the model){elsewhere} without "
            f"{option('resume_from_checkpoint')}.")

    def best(self, recorded: str) -> Path:
        """The best checkpoint to load at the end (``load_best_model_at_end``), checked like a resume:
        a ``checkpoint-N`` folder of this output_dir, present, and matching its manifest's checksums.
        Raise :class:`CheckpointError` saying why not; nothing is loaded then."""
        folder = Path(recorded).expanduser()
        keeps = " The model keeps its final weights; the last checkpoint holds them."
        if not (CHECKPOINT_RE.match(folder.name) and folder.parent.resolve() == self.output_dir):
            raise CheckpointError(f"load_best_model_at_end: the best checkpoint recorded is {recorded}, which is not a "
                                  f"checkpoint-N folder of this run's output_dir {self.output_dir} (it was recorded in "
                                  "another folder: a resume from there, or a run folder copied or moved without "
                                  "that checkpoint), so braeburn does not load it."
                                  + keeps + " Load that checkpoint yourself if you trust it.")
        if not folder.is_dir() or folder.is_symlink():
            raise CheckpointError(f"load_best_model_at_end: the best checkpoint {folder} is missing (deleted after it "
                                  "was recorded, or never written: see the save warnings above)." + keeps)
        try:
            self.verify(folder)
        except CheckpointCorruptError as error:
            raise CheckpointError(f"load_best_model_at_end: {error}{keeps}") from None
        return folder

    def follow_a_moved_run(self, state: TrainerState) -> str | None:
        """A run folder copied (``cp -a``) or moved, then resumed: its trainer_state.json names checkpoints in
        their old place. Where this output_dir holds the checkpoint of the same name and of the same run (its
        run id), point ``best_checkpoint`` and ``last_checkpoint`` at it, so that rotation keeps the best and
        load_best_model_at_end finds it. Return a line saying so for the best one; None when it did not move."""
        note = None
        for field in ("best_checkpoint", "last_checkpoint"):
            recorded = getattr(state, field)
            here = self._same_checkpoint_here(recorded, state.run_id)
            if here is None:
                continue
            setattr(state, field, str(here))
            if field == "best_checkpoint":
                note = (f"the best checkpoint recorded, {recorded}, is in the folder this run was copied or moved "
                        f"from; {here}, the same checkpoint of the same run, is used instead")
        return note

    def _same_checkpoint_here(self, recorded: str | None, run_id: str | None) -> Path | None:
        if not recorded or run_id is None:
            return None
        old = Path(recorded)
        here = self.output_dir / old.name
        if not CHECKPOINT_RE.match(old.name) or old.parent.resolve() == self.output_dir:
            return None
        if here.is_symlink() or not here.is_dir() or run_of(here) != run_id:
            return None
        return here

    def set_aside_newest(self) -> Path | None:
        """The newest complete checkpoint of the earlier runs braeburn set aside in output_dir (its record names
        them: ``previous-run-N``), the highest step first; None when they hold none."""
        folders = ownership.set_aside_folders(self.output_dir)
        found = [CheckpointManager(self.output_dir / name).latest() for name in folders]
        return max((p for p in found if p is not None), key=step_of, default=None)

    def _refuse_several_runs(self, found: list[Path]) -> None:
        """'latest' cannot choose between the checkpoints of two runs (a folder reused with
        --overwrite_output_dir): their seeds, learning rates and data may differ, and the highest step may
        well be the older run's. Refuse, naming each run's newest checkpoint."""
        newest: dict[str | None, Path] = {run_of(folder): folder for folder in found}  # oldest first: the last wins
        if len(newest) < 2:
            return
        listed = "; ".join(f"run {run or '(not recorded)'}: {folder.name}" for run, folder in newest.items())
        raise CheckpointError(f"{given('resume_from_checkpoint', 'latest')} but {self.output_dir} holds the "
                              f"checkpoints of {len(newest)} different runs (newest of each: {listed}), so the "
                              "latest checkpoint could be the wrong run's. Pass the checkpoint to continue: "
                              f"{option('resume_from_checkpoint', f'{self.output_dir}/checkpoint-N')}, or delete the "
                              "other run's checkpoints.")

    def begin_run(self, state: TrainerState) -> str | None:
        """Give ``state`` a run id unless it resumed one, and say what this run will leave alone: the
        checkpoints of other runs in output_dir are neither rotated nor resumed by 'latest'."""
        if state.run_id is None:  # a new run, or a resume of a checkpoint that recorded no run
            state.run_id = uuid.uuid4().hex
        others = [p.name for p in self.checkpoints() if run_of(p) != state.run_id]
        if not others:
            return None
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        return (f"{self.output_dir} holds {len(others)} checkpoints of another run ({shown}). This run does not "
                "delete them (save_total_limit counts only its own checkpoints; a save of the same step replaces "
                "the folder of that name, as --overwrite_output_dir allows), and --resume_from_checkpoint "
                "latest will refuse to choose between the runs: pass a checkpoint path then, or use a fresh "
                "--output_dir.")

    # -- writing ---------------------------------------------------------------------------------
    def clean_staging(self) -> None:
        """Remove half-written checkpoints left by a crash: only the staging folders that braeburn's record
        (:mod:`braeburn.checkpoints.ownership`) names, never a folder that merely has such a name."""
        if not self.output_dir.is_dir():
            return
        out, removed = self.output_dir, []
        for kept in self._replaced():  # the good copy of a checkpoint whose replacement was killed: restore it
            if ownership.owns(out, kept.name):
                os.replace(kept, out / REPLACED_RE.match(kept.name).group(1))
                _fsync_dir(out)
        for name in ownership.recorded(out):
            if STAGING_RE.match(name) and ownership.owns(out, name) and remove_tree_quietly(out / name):
                removed.append(name)  # (forgotten only once gone: a part left stays braeburn's, removed next time)
        ownership.forget(out, removed)

    def save(self, accelerator: Any, state: TrainerState, files: dict[str, bytes] | None = None) -> Path:
        """Write ``checkpoint-<global_step>`` atomically; on failure nothing changes on disk.

        Called on every process: all of them take part in ``save_state`` (FSDP ranks write their
        shards), and only the main process writes the trainer state, ``files`` (name -> bytes: a
        Transformers model's config.json), the manifest, and renames.
        """
        target = self.output_dir / f"checkpoint-{state.global_step}"
        staging = self.output_dir / f".checkpoint-{state.global_step}.tmp"
        main = getattr(accelerator, "is_main_process", True)
        previous, claimed = state.last_checkpoint, not main
        try:
            if main:
                self.output_dir.mkdir(parents=True, exist_ok=True)
                ownership.claim(self.output_dir, _save_names(target), f"braeburn writes {target.name} there")
                claimed = True  # every name below is braeburn's now: removing or replacing it harms nothing else
                remove_tree(staging)  # (a link there: the link only)
            accelerator.save_state(str(staging))
            state.last_checkpoint = str(target)
            if main:
                state.save(staging)
                for name, data in (files or {}).items():
                    (staging / name).parent.mkdir(parents=True, exist_ok=True)
                    with create_new(staging / name) as handle:
                        handle.write(data)
                write_manifest(staging, state.global_step)
                self._publish(staging, target)
                ownership.forget(self.output_dir, [name for name in list(_save_names(target))[1:]  # the staging
                                                   if not os.path.lexists(self.output_dir / name)])  # names gone now
        except Exception as error:
            state.last_checkpoint = previous  # this one was never written
            if claimed:  # (on every rank, as before; only rank 0 keeps the record)
                remove_tree_quietly(staging)
                remove_tree_quietly(staging_dir(staging))  # the Accelerator's own staging beside it
            if main and claimed:
                ownership.prune(self.output_dir)
            latest = self.latest(state.run_id)  # this run's (or any, for a state without a run)
            kept = f"the previous checkpoint {latest} is intact" if latest else "no earlier checkpoint exists"
            fix = ("" if isinstance(error, ownership.ForeignFileError) else
                   f" Free disk space or fix the permissions of {self.output_dir}.")
            raise CheckpointError(f"Saving {target} failed: {type(error).__name__}: {error}. Nothing was "
                                  f"replaced ({kept}); training state in memory is unchanged.{fix}") from error
        finally:  # (a kill or KeyboardInterrupt leaves the staging names recorded: clean_staging removes them)
            _barrier(accelerator)  # no rank goes on (or resumes) before the checkpoint is in place
        return target

    def _publish(self, staging: Path, target: Path) -> None:
        """Rename ``staging`` to ``target``. When the same step was saved already (a resume that saves at
        once), the old one is kept as ``.checkpoint-N.tmp.old`` until the new one is in place: a kill
        in between leaves it, and :meth:`checkpoints` and :meth:`clean_staging` take it back."""
        old = self.output_dir / f".{target.name}.tmp.old"
        if target.exists():
            remove_tree_quietly(old)
            os.replace(target, old)
            _fsync_dir(self.output_dir)
        os.replace(staging, target)
        _fsync_dir(self.output_dir)
        if old.exists():
            remove_tree_quietly(old)  # (a part that cannot go stays recorded: the next run removes it)

    def rotate(self, keep: Path | str | None = None, run_id: str | None = None) -> list[Path]:
        """Delete run ``run_id``'s oldest checkpoints beyond ``save_total_limit``, never ``keep`` (the best) or its
        newest. Checkpoints of other runs (an output_dir reused with --overwrite_output_dir) are never deleted."""
        if not self.save_total_limit:
            return []
        found = self.of_run(run_id)
        protected = {found[-1].resolve()} if found else set()
        if keep:
            protected.add(Path(keep).resolve())
        excess = len(found) - max(self.save_total_limit, len(protected))
        deleted = []
        for folder in found:
            if excess <= 0:
                break
            if folder.resolve() in protected or not self._own(folder) or not ownership.owns(self.output_dir,
                                                                                             folder.name):
                continue
            remove_tree(folder)
            deleted.append(folder)
            excess -= 1
        ownership.forget(self.output_dir, [folder.name for folder in deleted])
        return deleted

    # -- loading ---------------------------------------------------------------------------------
    def load(self, accelerator: Any, folder: Path) -> TrainerState:
        """Restore the Accelerator's objects and return the saved TrainerState (checksums already verified)."""
        try:
            state = TrainerState.load(folder)  # type-checked before anything is restored
        except TrainerStateError as error:
            raise CheckpointError(f"Checkpoint {folder} cannot be used: {error}. Resume from another checkpoint, "
                                  "or start afresh in a new output_dir.") from None
        try:
            accelerator.load_state(str(folder))
        except (RuntimeError, KeyError, ValueError) as error:
            detail = getattr(error, "detail", error)  # (the Accelerator's one line naming the file)
            raise CheckpointError(f"Checkpoint {folder} does not fit this run: {detail}. It was written for a "
                                  "different model, optimizer or number of processes; resume with the same "
                                  "script and options, or start afresh in a new output_dir.") from error
        return state


__all__ = ["CheckpointCorruptError", "CheckpointError", "CheckpointManager", "MANIFEST", "SaveLog", "run_of",
           "write_manifest", "written_by_transformers"]
