"""The kipcheck command-line application (top floor): every subcommand's entry point.

kio's phantom types import hypothesis, whose example database would otherwise appear as
`.hypothesis/` in whatever directory a user runs kipcheck from (next to their own files):
point it into kipcheck's cache before anything imports kio. The environment carries it
into the pytest processes certify starts. A value the user set wins.
"""

import os

os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY",
    os.path.join(os.environ.get("KIPCHECK_CACHE") or os.path.expanduser("~/.cache/kipcheck"), "hypothesis"),
)
