"""What the benchmarks share: writing their result files."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path: Path, content: dict) -> None:
    """Write ``content`` whole or not at all: a stop mid-write leaves the previous file intact."""
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(content, indent=2))
    partial.replace(path)
