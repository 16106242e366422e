"""What the run cache is doing, a line per training run as it starts and as it ends (trained or
read from the cache), with how many of the session's runs are done.

A ``Progress`` names the stream: the claims plugin gives its session's the terminal (a copy of
the standard error taken before pytest captures output, so the lines show while claims wait on
training, from pytest-xdist workers too) and a counter file shared by the session's processes;
the command line gives its own standard error; ``SILENT`` writes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock

from normsys.training.config import PRESETS, RunConfig, preset
from normsys.training.provenance import described


class Progress:
    """Where one session's progress lines go: file descriptor ``fd`` (None: nowhere), with
    finished runs counted in ``counter`` (a file shared by every process of the session) or in
    this object."""

    def __init__(self, fd: int | None = None, counter: Path | None = None):
        self.fd, self.counter, self.done = fd, counter, 0

    def _write(self, line: str) -> None:
        if self.fd is not None:
            os.write(self.fd, f"normsys: {line}\n".encode())

    def _count(self) -> int:
        if self.counter is None:
            self.done += 1
            return self.done
        with FileLock(str(self.counter) + ".lock"):
            done = int(self.counter.read_text() or 0) + 1 if self.counter.exists() else 1
            self.counter.write_text(str(done))
        return done

    def started(self, cfgs) -> None:
        what = label(cfgs[0]) if len(cfgs) == 1 else \
            f"{label(cfgs[0])} with {len(cfgs)} seeds stacked"
        self._write(f"training {what} ...")

    def finished(self, record, cached: bool) -> None:
        """A run ended: trained now, or read from the cache (when and where it was trained)."""
        cfg = RunConfig.from_dict(record.config)
        done = self._count()
        where = described(record.env)
        if "node" in record.env:  # trained on a cluster (normsys.claims.cluster)
            where = f"{where}; node {record.env['node']}"
        if cached:
            when = record.env.get("date", "an earlier session")
            self._write(f"[{done} runs done] {label(cfg)}: cached, trained in "
                        f"{record.wall_time:.0f} s on {when} ({where})")
        else:
            self._write(f"[{done} runs done] {label(cfg)}: trained in {record.wall_time:.0f} s "
                        f"({where})")

    def note(self, line: str) -> None:
        self._write(line)


SILENT = Progress()  # what a caller that names no stream gets


SHOWN = {"model.norm", "train.method", "train.seed"}  # in every label already
UNSHOWN = {"train.probe", "train.probe_batch", "train.snapshots", "train.keep_state"}


def label(cfg) -> str:
    """family/norm/method/seed, what else differs from the family's preset, (tier, fingerprint):
    two runs of one family, norm and seed read apart, e.g. ``tanh_mlp/none/bp/s0 residual=False``."""
    name = (f"{cfg.model.family}/{cfg.model.norm}/{cfg.train.method}/s{cfg.train.seed}"
            + "".join(f" {k.split('.')[1]}={v}" for k, v in differences(cfg)))
    return f"{name} ({cfg.data.tier} tier, {cfg.fingerprint()[:8]})"


def differences(cfg, most: int = 4) -> list[tuple[str, object]]:
    """Up to ``most`` fields in which ``cfg`` differs from its family's preset at its tier."""
    if cfg.model.family not in PRESETS:
        return []
    ours, base = cfg.flat(), preset(cfg.model.family, cfg.data.tier).flat()
    return [(k, v) for k, v in ours.items()
            if k not in SHOWN | UNSHOWN and base.get(k) != v][:most]
