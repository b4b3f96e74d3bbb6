"""A seeded fuzzer for what a deployed package is called with: wrong dtypes, wrong shapes, extreme values,
out-of-range indices, non-arrays.

    python -m devtools.input_fuzz PACKAGE [PACKAGE ...] [--n 200] [--seed 0]

Each case is one call of `tuner.load(PACKAGE)(...)` in this process, printed before it runs (a crash names its
case). Every case must run (finite or not: NaN in, NaN out is fine) or be refused with a TunerError; any other
exception is a finding. Prints one line per case and a summary; exits 1 on a finding. Used by
tests/test_input_fuzz.py in a subprocess, so a crash is a failed test, not a dead test run.
"""

from __future__ import annotations

import argparse
import random
import sys

import numpy as np

MUTATIONS = (
    "valid",
    "dtype",
    "shape",
    "empty",
    "nan_inf",
    "extreme",
    "index_high",
    "index_low",
    "int_limits",
    "non_contiguous",
    "not_an_array",
    "missing",
    "extra",
)


def mutate(rng: random.Random, feed: dict, specs: list[dict], kind: str) -> tuple[tuple, dict]:
    """(positional args, keyword args) of one call, made from a valid feed."""
    feed = {k: v.copy() for k, v in feed.items()}
    spec = rng.choice(specs)
    name, x = spec["name"], feed[spec["name"]]
    ints = [s for s in specs if np.dtype(s["dtype"]).kind in "iu"]
    if kind == "dtype":
        feed[name] = x.astype(rng.choice(["float64", "float16", "int32", "int8", "bool", "uint8", "complex64"]))
    elif kind == "shape":
        shape = list(x.shape) or [1]
        shape[rng.randrange(len(shape))] += rng.choice([1, 7, -1 if shape[0] > 1 else 2])
        feed[name] = np.zeros([max(d, 0) for d in shape] + ([1] if rng.random() < 0.3 else []), x.dtype)
    elif kind == "empty":
        feed[name] = np.zeros((0,) + x.shape[1:], x.dtype)
    elif kind == "nan_inf" and x.dtype.kind == "f":
        flat = x.reshape(-1)
        flat[rng.randrange(flat.size)] = rng.choice([np.nan, np.inf, -np.inf])
        if rng.random() < 0.5:
            x[...] = np.nan
    elif kind == "extreme" and x.dtype.kind == "f":
        x[...] = rng.choice([3.0e38, -3.0e38, 1e-45, -0.0])
    elif kind in ("index_high", "index_low", "int_limits") and ints:
        spec = rng.choice(ints)
        y = feed[spec["name"]]
        info = np.iinfo(y.dtype)
        hi = spec.get("range", [0, 2**20])[1]
        value = {
            "index_high": hi + 1 + rng.randrange(10**6),
            "index_low": -(hi + 2) - rng.randrange(10**6),
            "int_limits": rng.choice([info.max, info.min]),
        }[kind]
        y.reshape(-1)[rng.randrange(y.size)] = max(info.min, min(info.max, value))
    elif kind == "non_contiguous":
        feed[name] = np.asfortranarray(np.repeat(x, 2, axis=-1)[..., ::2]) if x.ndim else x
    elif kind == "not_an_array":
        feed[name] = rng.choice([None, "text", {"a": 1}, [1, 2, 3], 3.5, object()])
    elif kind == "missing":
        del feed[name]
    elif kind == "extra":
        feed["not_an_input"] = x
    if kind != "valid" and rng.random() < 0.2:  # the same call, positional
        return tuple(feed.values()), {}
    return (), feed


def run(paths: list[str], n: int, seed: int) -> int:
    import tuner
    from tuner.core.errors import TunerError

    findings = 0
    counts: dict[str, int] = {}
    for path in paths:
        model = tuner.load(path)
        rng = random.Random(seed)
        valid = model.random_inputs()
        for case in range(n):
            kind = MUTATIONS[case % len(MUTATIONS)] if case < len(MUTATIONS) else rng.choice(MUTATIONS)
            args, kwargs = mutate(rng, valid, model.inputs, kind)
            print(f"case {path}#{case} {kind}", flush=True)
            try:
                out = model(*args, **kwargs)
                verdict = "ran" + (
                    "" if all(np.isfinite(v).all() for v in out.values() if v.dtype.kind == "f") else " (non-finite)"
                )
            except TunerError as err:
                verdict = "refused"
                if not err.message:
                    verdict, findings = "refused without a message", findings + 1
            except Exception as err:  # noqa: BLE001  (the finding)
                verdict, findings = f"FINDING {type(err).__name__}: {str(err)[:200]}", findings + 1
            counts[f"{kind}: {verdict.split(':')[0]}"] = counts.get(f"{kind}: {verdict.split(':')[0]}", 0) + 1
            print(f"  -> {verdict}", flush=True)
    for key in sorted(counts):
        print(f"{key}: {counts[key]}")
    print(f"{findings} findings")
    return 1 if findings else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("packages", nargs="+")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    return run(args.packages, args.n, args.seed)


if __name__ == "__main__":
    sys.exit(main())
