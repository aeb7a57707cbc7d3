"""What the process environment held when braeburn was imported.

This module must stay free of torch imports: it records whether torch had
already loaded, because some variables (the MPS CPU fallback, the MPS memory
watermarks) are read only once, when libtorch starts.
"""

from __future__ import annotations

import os
import sys

TORCH_LOADED_FIRST: bool = "torch" in sys.modules
ENV_AT_IMPORT: dict[str, str] = dict(os.environ)
