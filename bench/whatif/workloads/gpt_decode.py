"""The bundled sample workload (sample_traces/gpt_decode_server.py) as a service, with the fix of
each finding zym reports on it applied in the source, one variant per fix.

A request is one batch of 16 prompts (``handle_batch``: pad, upload, greedy decode of 8
tokens, strip padding); a pass serves the same 7 batches as the bundled capture (2 warm-up +
5 measured, ``make_batches(7)``), so in steady state every shape has been seen (cuDNN plans and
allocator blocks exist). The baseline runs the sample's own functions, unchanged.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

_SAMPLE = Path(__file__).resolve().parents[3] / "sample_traces" / "gpt_decode_server.py"
_spec = importlib.util.spec_from_file_location("gpt_decode_server", _SAMPLE)
gds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gds)

VARIANTS = {
    "base": "the sample as it is",
    "tf32": "compute.fp32-matmul-no-tf32: torch.backends.cuda.matmul.allow_tf32 = True",
    "item_first": "syncs.scalar-readback: the EOS .item() check on the first decoding step only "
                  "(the first wait of each generate call stays, the other 7 go)",
    "rows_once": "transfers.repeated-small-dtoh: one .cpu() of the output, rows sliced on the "
                 "host",
    "pin_upload": "transfers.pageable-memory (HtoD): prompts staged in a reused pinned buffer, "
                  "uploaded with non_blocking=True",
    "tolist_once": "syncs.dtoh-copy-sync: lengths computed on the host copy, no .tolist() of "
                   "a device tensor",
    "all": "tf32 + item_first + rows_once + pin_upload",
}


def generate_item_first(model, ids, max_new_tokens=8):
    """``gds.generate`` with the EOS check (``.item()``, a host sync) on the first step only."""
    out = []
    for step in range(max_new_tokens):
        next_ids = model(ids).argmax(-1)
        if step == 0 and (next_ids == gds.EOS).all().item():
            break
        ids = torch.cat([ids, next_ids[:, None]], 1)
        out.append(next_ids)
    return torch.stack(out, 1)


def strip_rows_once(output_ids):
    """``gds.strip_padding`` with one device-to-host copy instead of one per row."""
    lengths = (output_ids != gds.PAD).sum(dim=1).tolist()
    host = output_ids.cpu()
    return [row[:n] for row, n in zip(host, lengths)]


def strip_tolist_once(output_ids):
    """``gds.strip_padding`` with the lengths taken from the rows' host copies."""
    rows = [row.cpu() for row in output_ids]
    return [row[:int((row != gds.PAD).sum())] for row in rows]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        self.model = gds.build_model(device) if device == "cuda" else _cpu_model()
        self.requests = gds.make_batches(7)
        fixes = {"tf32", "item_first", "rows_once", "pin_upload"} if variant == "all" else {variant}
        self.tf32 = "tf32" in fixes
        self.generate = generate_item_first if "item_first" in fixes else gds.generate
        self.strip = (strip_rows_once if "rows_once" in fixes
                      else strip_tolist_once if "tolist_once" in fixes else gds.strip_padding)
        self.pinned = None
        if "pin_upload" in fixes and device == "cuda":
            longest = max(len(p) for b in self.requests for p in b)
            self.pinned = torch.empty((16, longest), dtype=torch.long).pin_memory()


    def handle(self, prompts):
        if self.pinned is not None:
            padded = nn.utils.rnn.pad_sequence(prompts, batch_first=True,
                                               padding_value=gds.PAD)
            staged = self.pinned[:padded.shape[0], :padded.shape[1]]
            staged.copy_(padded)
            ids = staged.to(self.device, non_blocking=True)
        else:
            ids = nn.utils.rnn.pad_sequence(prompts, batch_first=True,
                                            padding_value=gds.PAD).to(self.device)
        return self.strip(self.generate(self.model, ids))


def _cpu_model():
    """The sample's model in float32 on the CPU (half matmuls are slow there): for --device
    cpu checks of the harness only."""
    model = gds.TinyGPT()
    return model.eval()


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"gpt_decode: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)

