"""What every artefact kipcheck builds into its cache shares (the kfake target, Tansu,
franz-go's test binary, the Toxiproxy server): a digest of the pinned sources that names the
binary, and the prefetch entry point CI runs before the tests (`python -m <build module>`)."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path


def sources_digest(source_dir: Path, names: tuple[str, ...]) -> str:
    """Digest of the named files: an edited source or a changed pin is a new binary."""
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode() + b"\0" + (source_dir / name).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def prefetch_main(ensure: Callable[[], Path], *errors: type[Exception]) -> int:
    """Build (or find) the artefact and print its path; a failed build is one line on
    stderr (the error's first line) and exit 2."""
    try:
        print(ensure())
    except errors as exc:
        print(f"kipcheck: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0
