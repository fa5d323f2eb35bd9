"""Stand-ins for the official monitoring images, which this machine cannot pull (no image registry): the
test rootfs with Debian's ``prometheus`` at ``prom/prometheus``'s ``/bin/prometheus``, and with Debian's
``prometheus-alertmanager`` at ``prom/alertmanager``'s ``/bin/alertmanager`` (its default templates where
Debian's build reads them). Labelled managed: the session's guard removes them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from docker_fixtures import MANAGED, ROOTFS_IMAGE

from support.alertmanager import ALERTMANAGER
from support.prometheus import PROMETHEUS

PROMETHEUS_IMAGE = "roost-test/prometheus:debian"
ALERTMANAGER_IMAGE = "roost-test/alertmanager:debian"
AM_TEMPLATES = "/usr/share/prometheus/alertmanager"


def build_prometheus_image(client: Any, ctx: Path) -> str:
    shutil.copy2(PROMETHEUS, ctx / "prometheus")
    (ctx / "Dockerfile").write_text(f"FROM {ROOTFS_IMAGE}\nCOPY prometheus /bin/prometheus\nLABEL {MANAGED}\n")
    client.images.build(path=str(ctx), tag=PROMETHEUS_IMAGE, rm=True)
    return PROMETHEUS_IMAGE


def build_alertmanager_image(client: Any, ctx: Path) -> str:
    shutil.copy2(ALERTMANAGER, ctx / "alertmanager")
    shutil.copytree(AM_TEMPLATES, ctx / "templates", ignore=shutil.ignore_patterns("ui", "no-ui", "*.sh"))
    (ctx / "Dockerfile").write_text(f"FROM {ROOTFS_IMAGE}\nCOPY alertmanager /bin/alertmanager\n"
                                    f"COPY templates {AM_TEMPLATES}\nLABEL {MANAGED}\n")
    client.images.build(path=str(ctx), tag=ALERTMANAGER_IMAGE, rm=True)
    return ALERTMANAGER_IMAGE
