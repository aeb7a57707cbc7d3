"""Device kinds: one file per kind; everything outside this package asks capabilities."""

from .base import PRECISIONS, Availability, DeviceKind, PrecisionSupport
from .host import HostFacts, current_host, gather_host_facts, use_host
from .registry import ACCELERATOR_CHOICES, KIND_NAMES, KINDS, get_kind

__all__ = ["ACCELERATOR_CHOICES", "Availability", "DeviceKind", "HostFacts", "KINDS", "KIND_NAMES",
           "PRECISIONS", "PrecisionSupport", "current_host", "gather_host_facts", "get_kind", "use_host"]
