"""One timed load of staged batches (``stage.py``) into a fresh store, as ``fleet ingest`` loads
them (``loader._load``: every table); prints JSON ``{"s": seconds, "rows": {...}}``.

    python bench/fleet/ab/load_one.py STAGE_DIR STORE_DIR
"""
from __future__ import annotations

import json
import pickle
import shutil
import sys
import time
from pathlib import Path

from zym.fleet import open_store
from zym.fleet.loader import IngestResult, _load, ensure_schema


def main() -> None:
    stage_root, store_dir = Path(sys.argv[1]), Path(sys.argv[2])
    batches = pickle.loads((stage_root / "batches.pkl").read_bytes())
    shutil.rmtree(store_dir, ignore_errors=True)
    store = open_store(store_dir)
    ensure_schema(store)
    result = IngestResult()
    t = time.perf_counter()
    for stage, prepared in batches:
        shutil.rmtree(stage / "links", ignore_errors=True)  # main's frames/stacks links
        _load(store, prepared, stage, result)
    seconds = time.perf_counter() - t
    store.close()
    print(json.dumps({"s": seconds, "rows": result.rows}))


if __name__ == "__main__":
    main()
