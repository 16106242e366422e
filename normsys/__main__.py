"""Command line: ``python -m normsys train --model encoder --norm l2 --seed 0 [--set key=value]``.

Any config field can be overridden with ``--set section.field=value`` (repeatable); ``--norm``,
``--seed``, ``--method`` and ``--tier`` are shortcuts. Prints a short summary; ``--json PATH``
writes the whole run record.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from normsys.config import PRESETS, preset


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m normsys", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train one run and print its summary")
    tr.add_argument("--model", default="encoder", choices=sorted(PRESETS),
                    help="preset with the original experiment's settings (default: encoder)")
    tr.add_argument("--norm", help="norm kind, e.g. layernorm, l2, none")
    tr.add_argument("--seed", type=int)
    tr.add_argument("--method", choices=["bp", "fa", "dfa"])
    tr.add_argument("--tier", choices=["cpu", "paper"], help="data tier (AG News pool)")
    tr.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                    help="override any config field, e.g. --set train.epochs=2")
    tr.add_argument("--json", type=Path, help="write the run record as JSON to this path")
    tr.add_argument("--no-cache", action="store_true", help="train even if a cached run exists")
    return parser.parse_args(argv)


def overrides(args: argparse.Namespace) -> dict[str, str]:
    changes = {key: value for key, value in (("model.norm", args.norm), ("train.seed", args.seed),
                                             ("train.method", args.method),
                                             ("data.tier", args.tier)) if value is not None}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects SECTION.FIELD=VALUE, got {item!r}")
        changes[key.strip()] = value.strip()
    return changes


def summary(record) -> str:
    m = record.metrics
    lines = [f"run {record.fingerprint}  ({record.env['device']}, {record.wall_time:.1f} s, "
             f"{record.steps} steps{', DIVERGED' if record.diverged else ''})",
             f"data: {record.data_source}"]
    lines += [f"  {k:<12} {v:.4f}" for k, v in m.items()]
    for name, p in record.probes.items():
        lines.append(f"  erank[{name}] = {p['erank']:.2f}  (rho {p['rho']:.3f}, "
                     f"stable rank {p['stable_rank']:.2f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from normsys.data import DataMissingError
    from normsys.train import run, train

    try:
        cfg = preset(args.model, **overrides(args))
        record = train(cfg) if args.no_cache else run(cfg)
    except (KeyError, ValueError, DataMissingError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(summary(record))
    if args.json:
        args.json.write_text(record.to_json())
        print(f"record written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
