"""Distributed training: the process group, the DDP wrap and collective helpers."""

from .process_group import (WorldInfo, barrier, broadcast_int, destroy_process_group, gather, gather_object,
                            init_process_group, is_initialized, reduce, world_from_env, wrap_ddp)

__all__ = ["WorldInfo", "barrier", "broadcast_int", "destroy_process_group", "gather", "gather_object",
           "init_process_group", "is_initialized", "reduce", "world_from_env", "wrap_ddp"]
