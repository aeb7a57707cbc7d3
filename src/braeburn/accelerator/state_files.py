"""The Accelerator's checkpoints: save_state() writes models, optimizers, schedulers, grad scaler, RNG states and
dataloader positions atomically (staged beside the folder, then renamed into place, every rank in step);
load_state() restores them into the prepared objects; the hooks the Accelerate-compatible class overrides."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ..checkpoints import manifest, output_lock
from ..checkpoints import state as state_io
from ..distributed import checkpoint as dist_ckpt
from ..distributed import process_group as pg

MAX_HELD_STATE_LOCKS = 8  # save_state() folders whose lock is held until end_training (one open file each)


class StateFilesMixin:
    """save_state()/load_state() (mixed into the Accelerator: reads its plan, prepared objects, precision policy,
    ``_state_names`` and ``_locked``)."""

    def save_state(self, output_dir: str | os.PathLike | None = None, **_: Any) -> None:
        """Models, optimizers, schedulers, grad scaler, RNG states and dataloader positions, written
        atomically: into a directory beside ``output_dir``, then renamed into place."""
        output_dir = self._checkpoint_dir(output_dir)
        # Every rank raises if any rank failed (one all-reduce per phase): the ranks stay in step, and
        # a failed save never publishes a checkpoint missing one rank's files.
        self._on_every_rank(lambda: self.is_main_process and self._start_save(output_dir))
        self._on_every_rank(lambda: self._write_state(state_io.staging_dir(output_dir)))
        self._on_every_rank(lambda: self.is_main_process and self._finish_save(output_dir))
        self._after_automatic_save(output_dir)

    # Hooks with braeburn's defaults, which the Accelerate-compatible class overrides (automatic checkpoint
    # naming, register_for_checkpointing, trackers).
    def _checkpoint_dir(self, output_dir: Any) -> Any:
        """The folder save_state()/load_state() write to or read from."""
        if output_dir is None:
            raise ValueError("save_state() needs a folder: pass save_state(output_dir)")
        return output_dir

    def _after_automatic_save(self, output_dir: Any) -> None:
        """After save_state() published ``output_dir``."""

    def _save_custom_objects(self, directory: Path) -> None:
        """Objects of the user's to save beside the prepared ones."""

    def _load_custom_objects(self, directory: Any) -> None:
        """Objects of the user's to restore beside the prepared ones."""

    def _latest_automatic_checkpoint(self) -> str:
        """The folder load_state() reads when given none."""
        raise ValueError("load_state() needs a folder: pass load_state(input_dir)")

    def _end_trackers(self) -> None:
        """At end_training: the experiment trackers' end."""

    def _start_save(self, output_dir) -> None:
        """Rank 0 holds the lock of the state folder it writes (until end_training), unless a Trainer holds
        the folder it lies in. Only that folder: jobs saving to sibling folders do not exclude each other."""
        folder = os.path.abspath(output_dir)
        state_io.check_replaceable(folder)  # a folder of the user's at that name is refused (before any write)
        if folder not in self._locked and not output_lock.held_over(folder):
            self._check_not_in_a_live_run(folder)
            output_lock.acquire(folder, purpose="save_state", state_folder=True)
            self._locked[folder] = None
            while len(self._locked) > MAX_HELD_STATE_LOCKS:  # a folder per step: hold only the recent ones
                oldest = next(iter(self._locked))
                del self._locked[oldest]
                output_lock.release(oldest)
        state_io.prepare_staging(output_dir)

    @staticmethod
    def _check_not_in_a_live_run(folder: str) -> None:
        parent = os.path.dirname(folder)
        try:
            output_lock.ensure_free(parent)
        except output_lock.OutputDirBusyError as error:
            raise output_lock.OutputDirBusyError(
                f"save_state({folder!r}): its folder {parent!r} is the output_dir of another live run "
                f"({output_lock.describe_holder(Path(parent) / output_lock.LOCK_FILE)}), whose checkpoints and "
                "logs this save would mix with. Pass a folder outside it to save_state(), or wait for that run "
                "to end.") from error

    def _finish_save(self, output_dir) -> None:
        staging = state_io.staging_dir(output_dir)
        manifest.write_sizes(staging, manifest.SHARDED if self.plan.strategy == "fsdp" else manifest.WHOLE)
        state_io.publish(output_dir)

    def _on_every_rank(self, work) -> None:
        error: BaseException | None = None
        try:
            work()
        except Exception as raised:
            error = raised
        if not pg.all_ok(error is None, self.device):
            raise error or RuntimeError("save_state() failed on another process (its error is in its log); "
                                        "nothing was published")

    def _write_state(self, staging) -> None:
        state_io.save_file(state_io.rng_state(self.plan.device), staging, f"rng_state_{self.process_index}.pt")
        if not self.sync_gradients:  # mid-accumulation: the partial gradients are part of the state
            self._check_can_save_gradients()
            state_io.save_file(self._gradients(), staging, f"gradients_{self.process_index}.pt")
        if self.plan.strategy == "fsdp":  # every rank writes its shards (one process writes the whole)
            dist_ckpt.save_sharded(self._models, [o.optimizer for o in self._optimizers], staging)
        if self.is_main_process:
            self._save_training_objects(staging)

    def _check_can_save_gradients(self) -> None:
        if self.shards_model:
            raise RuntimeError("save_state() was called in the middle of a gradient-accumulation window with "
                               "strategy='fsdp', whose partial gradients are held inside FSDP and cannot be saved. "
                               "Save after an optimizer step (when accelerator.sync_gradients is True).")

    def _save_training_objects(self, directory) -> None:
        save = state_io.save_file
        if self.plan.strategy != "fsdp":  # replicated: rank 0's copy is everyone's
            for i, model in enumerate(self._models):
                module = self.unwrap_model(model)
                state_io.save_model_state(module.state_dict(), directory, i, module)
            for i, optimizer in enumerate(self._optimizers):
                save(optimizer.state_dict(), directory, self._state_names.name("optimizer", i))
        for i, scheduler in enumerate(self._schedulers):
            save(scheduler.state_dict(), directory, self._state_names.name("scheduler", i))
        for i, loader in enumerate(self._dataloaders):  # the position in samples, for any world size
            save({**loader.state_dict(), "num_processes": self.num_processes,
                  "batch_size": loader.per_process_batch_size}, directory, f"dataloader_{i}.pt")
        self._save_custom_objects(directory)
        save({"precision": self._policy.state_dict(), "precision_name": self.precision,
              "precision_reason": self.plan.precision_reason, "accumulation_step": self._accumulation_step,
              "counts": self._counts(), "num_processes": self.num_processes}, directory, "accelerator.pt")

    def _resume_measured_precision(self, saved: str | None, why: str | None) -> None:
        """mixed_precision="auto" still to be measured: a resumed run keeps the precision its checkpoint trained in
        (and its grad scaler's state), rather than a new measurement that could choose another. ``why``: how the run
        that wrote the checkpoint came to that precision (measured, or not and why), where the checkpoint says."""
        if self.plan.precision_candidates and saved in ("no", *self.plan.precision_candidates):
            name = "float32" if saved == "no" else saved
            earlier = (f"that run's choice: {why.removeprefix('auto: ')}" if isinstance(why, str) and why
                       else "the checkpoint does not say whether that run measured it")
            self.set_precision(saved, f"auto: {name}, as the checkpoint trained ({earlier})")

    def _gradients(self) -> list[list[torch.Tensor | None]]:
        return [[p.grad for p in self.unwrap_model(model).parameters()] for model in self._models]

    def _restore_gradients(self, saved: list[list[torch.Tensor | None]]) -> None:
        for model, grads in zip(self._models, saved):
            for parameter, grad in zip(self.unwrap_model(model).parameters(), grads):
                parameter.grad = None if grad is None else grad.to(parameter.device)

    def _load_models_and_optimizers(self, input_dir, layout: str) -> None:
        if layout == manifest.SHARDED:  # written by FSDP: DCP reshards for this world size
            dist_ckpt.load_sharded([self.unwrap_model(m) for m in self._models],
                                   [o.optimizer for o in self._optimizers], input_dir)
            return
        if self.shards_model:
            raise ValueError(f"{input_dir} holds whole (replicated) weights, written with strategy='ddp' or one "
                             "process, but this run shards the model with strategy='fsdp'. Resume it with "
                             "strategy='ddp' (or one process), or start the FSDP run afresh.")
        for i, model in enumerate(self._models):  # (a file that does not fit: one error naming it)
            state_io.load_model_into(self.unwrap_model(model), input_dir, i)
        for i, optimizer in enumerate(self._optimizers):
            state_io.load_optimizer_into(optimizer, input_dir, i, self._state_names)

    def _counts(self) -> dict[str, int]:
        return {"models": len(self._models), "optimizers": len(self._optimizers),
                "schedulers": len(self._schedulers), "dataloaders": len(self._dataloaders)}

    def load_state(self, input_dir: str | os.PathLike | None = None, **_: Any) -> None:
        """Restore what :meth:`save_state` wrote, into the objects prepared (in the same order)."""
        input_dir = input_dir if input_dir is not None else self._latest_automatic_checkpoint()
        load = state_io.load_file
        input_dir = state_io.readable_dir(input_dir)
        layout = manifest.layout_of(input_dir)  # nothing is read that the manifest does not list
        meta = load(input_dir, "accelerator.pt")
        if meta["counts"] != self._counts():
            raise ValueError(f"{input_dir} holds {meta['counts']}, but this Accelerator has prepared "
                             f"{self._counts()}: prepare the same models, optimizers, schedulers and dataloaders, "
                             "in the same order, before load_state()")
        self._load_models_and_optimizers(input_dir, layout)
        for i, scheduler in enumerate(self._schedulers):
            name = state_io.state_file(input_dir, self._state_names, "scheduler", i)
            scheduler.load_state_dict(load(input_dir, name))
        for i, loader in enumerate(self._dataloaders):
            saved = load(input_dir, f"dataloader_{i}.pt")
            loader.load_state_dict(dist_ckpt.resume_position(saved, loader.per_process_batch_size,
                                                             self.num_processes))
        self._resume_measured_precision(meta.get("precision_name"), meta.get("precision_reason"))
        self._policy.load_state_dict(meta["precision"])
        self._load_custom_objects(input_dir)
        self._accumulation_step = int(meta["accumulation_step"])
        gradients = f"gradients_{self.process_index}.pt"
        if os.path.exists(os.path.join(input_dir, gradients)):
            self._restore_gradients(load(input_dir, gradients))
        rank_file = f"rng_state_{self.process_index}.pt"
        if not os.path.exists(os.path.join(input_dir, rank_file)):
            rank_file = "rng_state_0.pt"  # saved with fewer processes
        state_io.set_rng_state(load(input_dir, rank_file), self.plan.device)
