"""Run the `braeburn` command in a child process on faked host facts (tests/conftest.py's HOSTS).

    python tests/cli/fake_host_cli.py HOST braeburn-arguments...

For CLI tests that need a real process (real standard input, end of input, exit status) and must
ask the same questions on any machine: a CPU box, a CUDA workstation, a Mac.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout root, for tests.conftest

from braeburn.cli.main import main  # noqa: E402
from braeburn.devices.host import use_host  # noqa: E402
from tests.conftest import HOSTS  # noqa: E402

if __name__ == "__main__":
    with use_host(HOSTS[sys.argv[1]]):
        sys.exit(main(sys.argv[2:]))
