"""`make report` (snakemake --report results/{scale}/report.html): one HTML file with every figure
and table of the scale, each with its caption from config.yaml's title, opened in Debian's
headless Chromium, which renders it and takes a screenshot (report-screenshot.png in the test's
tmp folder; `pytest -s` prints its path). Chromium: installed as root with apt-get, else the
test is skipped with the reason."""
import shutil
import subprocess

import pytest

from arrepro.cluster.tools import apt_install
from test_workflow import edit_config, smk
from workflow_copy import copy_workflow

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def chromium():
    exe = shutil.which("chromium")
    if exe:
        return exe
    problem = apt_install(["chromium"], capture=True)
    if problem:
        pytest.skip(f"needs Debian's chromium: {problem}")
    return shutil.which("chromium")


def test_report_shows_every_figure_and_table_with_its_caption(tmp_path, chromium):
    wd = copy_workflow(tmp_path)

    def with_a_table(c):  # fig2 of the tiny scale, and a table over the same cells
        e = c["scales"]["tiny"]["experiments"]
        e["table_lr_window"] = {"title": "Good-LR window of the tiny grid", "table": "lr_window",
                                "grids": e["fig2"]["grids"]}
        del e["fig1"]  # the report shows every figure of the scale: keep to the one built here
    edit_config(wd, with_a_table)
    smk(wd, "--cores", "2", "results/tiny/fig2.png", "results/tiny/table_lr_window.csv", "--config", "scale=tiny")
    smk(wd, "--report", "results/tiny/report.html", "--config", "scale=tiny")
    html = (wd / "results/tiny/report.html").read_text()
    for name, title in (("fig2.png", "tiny"), ("table_lr_window.csv", "Good-LR window of the tiny grid")):
        assert name in html and f"<strong>{title}</strong>" in html, name  # registered, captioned

    url = (wd / "results/tiny/report.html").as_uri()
    shot = tmp_path / "report-screenshot.png"
    run = [chromium, *CHROMIUM_FLAGS, "--window-size=1400,900", "--virtual-time-budget=10000"]
    subprocess.run(run + [f"--user-data-dir={tmp_path / 'u1'}", f"--screenshot={shot}", url],
                   capture_output=True, timeout=300, check=True)
    dom = subprocess.run(run + [f"--user-data-dir={tmp_path / 'u2'}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    # the report's page ran: its menu lists both categories (the file itself holds them only as data)
    assert ">Figures<" in dom and ">Tables<" in dom and ">Figures<" not in html
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
