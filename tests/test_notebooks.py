"""The notebooks in notebooks/ run end to end (nbclient) and are stored without outputs."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="the dev extra installs nbformat")
    nbclient = pytest.importorskip("nbclient", reason="the dev extra installs nbclient")
    pytest.importorskip("ipykernel", reason="the dev extra installs ipykernel")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on any failing cell
    pngs = list(tmp_path.glob("*.png"))
    assert pngs and all(p.stat().st_size > 5000 for p in pngs)
