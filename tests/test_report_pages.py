"""The report as a reader sees it, in headless Chromium (Debian's, driven by Selenium
through ChromeDriver): the tables listed in the papers' order, each opening in the page as a
rendered table under its caption, an info panel without the table job's settings, and a
screenshot of a table's view.

Needs Debian's chromium and chromium-driver; tests/browser/install_packages.sh installs
them when missing (as root). Where that cannot be done the tests say so in one line and
skip, except under CI=true, where the skip is a failure: CI always runs them.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grabrag.report.specs import paper_order, report_labels, tables

from .conftest import REPO, copy_run, install_missing_packages, snakemake, unavailable

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL = REPO / "tests" / "browser" / "install_packages.sh"
BROWSER_TEST = "browser test"
WINDOW_SIZE = (1400, 1000)
# Without the networking flags Chromium keeps dialling Google's hosts from a closed network.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size={},{}".format(*WINDOW_SIZE),
)


def _browser_missing() -> list[str]:
    return [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).exists()]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Headless Chromium under Selenium, installed from Debian's packages when missing."""
    missing = install_missing_packages(INSTALL, _browser_missing, BROWSER_TEST, timeout=900)
    if missing:
        unavailable(
            BROWSER_TEST, f"{', '.join(missing)} missing (needs root and apt-get: {INSTALL})"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium')}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def report(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny run's report (made in a copy: the tiny run is only read)."""
    workdir = tmp_path_factory.mktemp("report")
    copy_run(tiny_run, workdir)
    snakemake(workdir, "--report", "results/report.html")
    return workdir


def _open(browser, report: Path, category: str = "Tables") -> None:
    from selenium.webdriver.common.by import By

    browser.get((report / "results/report.html").as_uri())
    browser.find_element(By.XPATH, f"//a[normalize-space()='{category}']").click()


def _listed(browser) -> list[str]:
    from selenium.webdriver.common.by import By

    rows = browser.find_elements(By.XPATH, "//tr[.//a[@iconname='eye']]")
    return [row.find_element(By.TAG_NAME, "td").text.strip() for row in rows]


def _row(browser, label: str):
    from selenium.webdriver.common.by import By

    return browser.find_element(By.XPATH, f"//tr[td[normalize-space()='{label}']]")


def _produced(report: Path) -> list[str]:
    """The tables the run made, in their declared order."""
    made = {p.stem for p in (report / "results/tables").glob("*.html")}
    return [name for name in tables() if name in made]


def test_the_report_lists_the_tables_in_the_papers_order(browser, report: Path) -> None:
    from grabrag.pipeline.files import EXTRA_TABLES

    _open(browser, report)
    listed = _listed(browser)
    # the papers' tables, then ours outside the registry (the reproduction report, the
    # cost ledger; the re-ask audit is off here)
    made = {p.stem for p in (report / "results/tables").glob("*.html")}
    extra = [name for name in EXTRA_TABLES if name in made]
    assert extra == ["reproduction", "reproduction_claims", "cost_ledger"]
    names = paper_order(_produced(report))
    assert listed == list(report_labels([*names, *extra]).values())
    # read as the papers number them, not as strings sort ("table10" before "table2")
    order = [label.split()[1] for label in listed]
    assert order.index("table2_policies") < order.index("table10_aurc")
    assert order.index("table11_ece") < order.index("table11b_ece15")
    assert order.index("table11b_ece15") < order.index("table12_p3_sweep")
    assert order.index("table13_seed_sensitivity") < order.index("evid_results")


def test_each_table_opens_in_the_page_under_its_caption(
    browser, report: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    names = paper_order(_produced(report))
    labels = report_labels(names)
    assert len(names) > 20
    _open(browser, report)  # the list stays beside the open page: one load for every table
    for name in names:
        _row(browser, labels[name]).find_element(By.CSS_SELECTOR, "a[iconname='eye']").click()
        _switch_to_page(browser, name)
        try:
            caption = browser.find_element(By.TAG_NAME, "caption").text
            header = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "thead th")]
            rows = browser.find_elements(By.CSS_SELECTOR, "tbody tr")
            first = [td.text for td in rows[0].find_elements(By.TAG_NAME, "td")]
        finally:
            browser.switch_to.default_content()
        tables_dir = report / "results/tables"
        # the caption the Markdown table carries (its first line, the note included)
        assert caption == (tables_dir / f"{name}.md").read_text().splitlines()[0], name
        with (tables_dir / f"{name}.csv").open(newline="") as handle:
            printed = list(csv.reader(handle))
        if len(printed) > 1:  # a table with rows: its header, row count and first row
            assert header == printed[0], name
            assert len(rows) == len(printed) - 1, name
            assert first == [cell.strip() for cell in printed[1]], name
        else:
            assert first == ["(no rows)"], name
        if name == "table1_hwsa":
            _screenshot_shows_the_table(browser, tmp_path / "table1_hwsa.png")


def _switch_to_page(browser, name: str, timeout: float = 10.0) -> None:
    """Into the frame that shows ``name``'s page (its title), once the click has swapped
    the previous table's page out."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    title = None
    while time.monotonic() < deadline:
        try:
            browser.switch_to.frame(browser.find_element(By.TAG_NAME, "iframe"))
            title = browser.execute_script("return document.title")
            if title == name:
                return
        except WebDriverException:
            pass
        browser.switch_to.default_content()
        time.sleep(0.1)
    pytest.fail(f"clicking {name} did not open its page (the page shown: {title})")


def _screenshot_shows_the_table(browser, path: Path) -> None:
    """The view as a reader sees it: the page drawn (not blank) beside the list."""
    from PIL import Image

    browser.save_screenshot(str(path))
    image = Image.open(path).convert("L")
    # the window asked for (--window-size) and the page's viewport inside it: the
    # screenshot is the viewport, the window less Chromium's own bars
    outer = browser.execute_script("return [window.outerWidth, window.outerHeight]")
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    assert tuple(outer) == WINDOW_SIZE, outer
    assert image.size == tuple(inner) and image.size[0] == WINDOW_SIZE[0], (image.size, inner)
    # the right half holds the table page: text on white, so many shades and mostly light
    page = image.crop((image.size[0] // 3, 0, image.size[0], image.size[1] // 2))
    histogram = page.histogram()
    assert sum(1 for count in histogram if count) > 30, "the table page is blank"
    assert sum(histogram[200:]) > 0.5 * sum(histogram), "the table page is not drawn"
    print(f"screenshot of Table 1 in the report: {path}")


def test_the_info_panel_shows_the_caption_and_not_the_job_settings(browser, report: Path) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, report)
    label = report_labels(paper_order(_produced(report)))["table1_hwsa"]
    _row(browser, label).find_element(By.CSS_SELECTOR, "a[iconname='information-circle']").click()
    time.sleep(0.2)
    panel = browser.find_element(By.TAG_NAME, "body").text
    assert "table1_hwsa, under its caption" in panel
    assert "table_pages" in panel
    # the table job's params (its cells, settings and code hash) stay out of the panel
    for param in ("cells=", "settings=", "code=", "decoding="):
        assert param not in panel, param
