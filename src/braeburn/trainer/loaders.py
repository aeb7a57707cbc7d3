"""The Trainer's DataLoaders: one per dataset and use (training, evaluation, prediction), their collation, worker
options and random generator, and the hooks the Transformers-style Trainer overrides (a subclass's
get_eval_dataloader, the global generator)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

from ..data.collate import BucketPadding, position_limit


class LoadersMixin:
    """Builds and prepares the loaders (mixed into the Trainer: reads its config, accelerator, model, collate_fn,
    eval_dataset and ``_eval_loaders``)."""

    def _loader(self, dataset: Dataset, batch_size: int, shuffle: bool, train: bool | None = None) -> DataLoader:
        config = self.config
        generator = self._loader_generator()
        collate = self.collate_fn
        if self._pads_to_buckets:  # text batches padded to a few lengths: few kernel plans and graphs
            collate = BucketPadding(collate, position_limit(self.accelerator.unwrap_model(self.model)), coarse=True)
        workers = {"persistent_workers": config.dataloader_persistent_workers,
                   "prefetch_factor": config.dataloader_prefetch_factor,
                   "multiprocessing_context": config.dataloader_multiprocessing_context} \
            if config.dataloader_num_workers > 0 else {}
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, collate_fn=collate,
                          num_workers=config.dataloader_num_workers, generator=generator,
                          drop_last=config.dataloader_drop_last and (shuffle if train is None else train), **workers)

    def _loader_generator(self) -> torch.Generator | None:
        """The generator a DataLoader draws its worker seed from at every iter(). A hook: here one of its own, so
        that starting an epoch or an evaluation draws nothing from torch's global generator (which the dropout masks
        come from); the Transformers Trainer's DataLoaders draw from the global one (None), as Transformers' do. A
        resumed run is exact either way (a resumed epoch's draw is undone: data/loader.py)."""
        config = self.config
        return torch.Generator().manual_seed(config.seed if config.data_seed is None else config.data_seed)

    @property
    def _pads_to_buckets(self) -> bool:
        """Only where each new shape costs a kernel plan or a graph (CUDA, MPS): on the CPU a new length costs
        nothing, and padding further is only more compute (clm on the CPU: 12% slower with buckets)."""
        return self.config.pad_to_buckets and self.accelerator.plan.device.new_shapes_cost

    def _eval_loader(self, dataset: Dataset):
        """The prepared loader evaluate() runs over. A hook: here the one loader of ``dataset``
        (:meth:`_prepared_eval_loader`); the Transformers Trainer asks a subclass's get_eval_dataloader."""
        return self._prepared_eval_loader(dataset)

    def _test_loader(self, dataset: Dataset):
        """The prepared loader predict() runs over; a hook, as :meth:`_eval_loader`."""
        return self._prepared_eval_loader(dataset)

    def _prepare_eval_loaders(self) -> None:
        """Before a checkpoint is loaded, the loaders that evaluations during training will save. A hook: the
        Transformers Trainer prepares none when a subclass makes them (get_eval_dataloader, at each evaluation)."""
        if self.eval_dataset is not None and self.config.eval_strategy != "no":
            self._prepared_eval_loader(self.eval_dataset)

    def _prepared_eval_loader(self, dataset: Dataset):
        """Prepared once per dataset: the Accelerator saves every prepared loader, and a resumed run must
        prepare the same ones, in the same order, before loading a checkpoint."""
        key = id(dataset)
        if key not in self._eval_loaders:
            loader = self._loader(dataset, self.config.per_device_eval_batch_size, shuffle=False)
            self._eval_loaders[key] = (dataset, self.accelerator.prepare(loader))
        return self._eval_loaders[key][1]
