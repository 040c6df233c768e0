"""Stage captures for the load A/B: the first N captures of a fleet, as the installed zym
stages them for ``fleet ingest``, and the prepared rows' bookkeeping (``batches.pkl``). Run once
per version, each with its own interpreter:

    python bench/fleet/ab/stage.py FLEET_DIR N STAGE_DIR

A zym with sidecars (``zym.fleet.sidecar``): ``zym fleet stage`` beside the captures (2
processes; skipped when current), then batches of them as ``fleet ingest`` makes
(``loader._link_sidecars``, ``STAGED_BATCH`` a batch). Before them: the captures analysed (2
processes) into Parquet parts, ``BATCH`` a batch, as that ``fleet ingest`` does.
"""
from __future__ import annotations

import pickle
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from zym.fleet.loader import BATCH
from zym.fleet.prepare import prepare_chunk


def main() -> None:
    fleet, n, root = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    files = sorted(fleet.glob("host*.parquet"))[:n]
    shutil.rmtree(root, ignore_errors=True)
    batches = []
    t = time.perf_counter()
    try:
        from zym.fleet import loader, sidecar
    except ImportError:
        sidecar = None
    if sidecar is not None:
        sidecar.stage_many(files, jobs=2)
        fp = sidecar.fingerprint()
        for at in range(0, len(files), loader.STAGED_BATCH):
            batch = [(sidecar.verified_id(p), p) for p in files[at:at + loader.STAGED_BATCH]]
            manifests = {cid: sidecar.read(p, cid, fp) for cid, p in batch}
            stage = root / f"s{at}"
            batches.append((stage, loader._link_sidecars(batch, manifests, stage, {})))
    else:
        with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
            for at in range(0, len(files), BATCH):
                batch = files[at:at + BATCH]
                stage = root / f"b{at}"
                chunks = [batch[i::2] for i in range(2) if batch[i::2]]
                parts = pool.map(prepare_chunk, chunks,
                                 [stage / f"part{i}" for i in range(len(chunks))],
                                 [{}] * len(chunks))
                batches.append((stage, [p for part in parts for p in part]))
    (root / "batches.pkl").write_bytes(pickle.dumps(batches))
    print(f"staged {len(files)} captures in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
