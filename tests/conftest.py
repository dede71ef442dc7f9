"""Test-wide settings: one torch thread (tiny models on a 2-core machine run far
faster single-threaded, and tests may share the machine with other work).
DEPTHLAB_TEST_THREADS=N runs them on N threads instead: scripts/test_kernels.sh uses it
to check that no numeric test depends on the thread count."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(int(os.environ.get("DEPTHLAB_TEST_THREADS", "1")))

# DEPTHLAB_TEST_RECIPES=1: a residual and a page section that exist only in tests, added
# by their recipes before any test module imports depthlab (tests/recipes.py).
if os.environ.get("DEPTHLAB_TEST_RECIPES"):
    import recipes  # noqa: E402

    recipes.register()


# The browser tests' module fixtures (tests/page_harness.py holds the pieces; it is
# imported only when a test asks for one, so the other tests never need playwright).
# A module that defines a fixture of the same name uses its own.
import pytest  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A micro `residual` experiment: real charts from a real (tiny) run."""
    from page_harness import micro_runs

    return micro_runs(tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium through Playwright."""
    from page_harness import chromium

    yield from chromium()


@pytest.fixture(scope="module")
def live(runs):
    """The page served on `runs` by uvicorn on a free loopback port; its URL."""
    from page_harness import serve

    url, stop = serve(runs)
    yield url
    stop()


@pytest.fixture(scope="module")
def live_empty(tmp_path_factory):
    """The page served on an empty runs folder (no experiment data); its URL."""
    from page_harness import serve

    url, stop = serve(tmp_path_factory.mktemp("runs-empty"))
    yield url
    stop()


@pytest.fixture(scope="module")
def exported_small(tmp_path_factory):
    """A static copy at the small grid, without experiment data; its file:// URL."""
    from depthlab.web.export import export_page

    return export_page(tmp_path_factory.mktemp("export"), runs_dir=tmp_path_factory.mktemp("none"),
                       grid="small").as_uri()
