"""Builds the SDK's wheel (``ccmrs_provider-<version>-py3-none-any.whl``)
into a directory and prints its path: the file ``make release`` ships and a
provider author installs with ``pip install <file>``.

    python scripts/build_wheel.py OUT_DIR

Run it with an interpreter that has setuptools (the venv of
``hack/python-venv.sh``; ``hack/python-sdk.sh wheel OUT_DIR`` does that).
It needs no network: no build isolation, no index. It builds from a copy of
``pyproject.toml``, ``README.md`` and ``src/`` (no caches), so the
checkout gets no ``build/`` or ``*.egg-info`` and the wheel holds only what
pyproject.toml packages. The same sources and ``SOURCE_DATE_EPOCH`` (the
zip entries' time; default: the last commit's time) give the same bytes.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The earliest time a zip entry can carry (1980-01-01).
ZIP_EPOCH = 315532800


def _source_date_epoch() -> str:
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return os.environ["SOURCE_DATE_EPOCH"]
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
        return out or str(ZIP_EPOCH)
    except (OSError, subprocess.SubprocessError):
        return str(ZIP_EPOCH)


def _copy_sources(dest: pathlib.Path) -> None:
    """The package's sources with fixed permissions (the wheel records
    them), without caches or build leftovers."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    dest.mkdir(mode=0o755)
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, dest / name)
    shutil.copytree(ROOT / "src", dest / "src", ignore=skip, copy_function=shutil.copyfile)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def build_wheel(out: pathlib.Path) -> pathlib.Path:
    """Builds the wheel into ``out`` (created if missing, a wheel of the same
    name replaced) and returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ccmrs-wheel-") as tmp:
        src = pathlib.Path(tmp) / "ccmrs-provider"
        built = pathlib.Path(tmp) / "dist"
        _copy_sources(src)
        env = {**os.environ, "SOURCE_DATE_EPOCH": _source_date_epoch()}
        # Not inherited: the wheel is built from this copy, nothing else.
        env.pop("PIP_FIND_LINKS", None)
        subprocess.run(
            [
                sys.executable,
                *("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"),
                *("--disable-pip-version-check", "--no-input", "-q"),
                *("--wheel-dir", str(built), str(src)),
            ],
            cwd=tmp,
            env=env,
            check=True,
            timeout=120,
        )
        (wheel,) = built.glob("ccmrs_provider-*.whl")
        target = out / wheel.name
        shutil.move(wheel, target)
        return target.resolve()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=pathlib.Path, help="directory to write the wheel into")
    print(build_wheel(parser.parse_args().out))


if __name__ == "__main__":
    main()
