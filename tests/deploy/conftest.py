from __future__ import annotations

import pytest

from tests.deploy.helm import Helm
from workers.controlplane.build import ensure_binaries


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The helm built with the control plane's binaries, with its cache, config and data in a temporary home."""
    return Helm(ensure_binaries().path("helm"), tmp_path_factory.mktemp("helm-home"))
