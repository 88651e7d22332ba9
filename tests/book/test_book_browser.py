"""The built book as a reader's browser shows it, with no network.

Serves ``_build/html`` on 127.0.0.1 and opens every page in headless Chromium (driven by selenium
through the system's chromedriver) with name resolution and proxies blocked, so nothing can come
from the internet. On every page:

- MathJax ran and typeset every formula: each element Sphinx marks as math (``.math``) holds an
  ``<mjx-container>``, MathJax reported no TeX error (``<mjx-merror>``), and no raw TeX delimiter
  (``\\(``, ``\\[``, ``$$``, ``\\begin{``) is left in the text outside code;
- every ``<img>`` loaded (``naturalWidth > 0``);
- the console has no error (the only one allowed is the theme's harmless ``THEBE_JS_URL``
  redeclaration);
- every dropdown admonition (the exercises' solutions) starts closed and opens when its title is
  clicked.

A full-page screenshot of each page goes to ``_build/screenshots/`` for people to look at.

Without Chromium, chromedriver or selenium the test is skipped with a message naming what to
install; under ``CI=true`` it fails instead, so CI always runs it.
"""
import base64
import functools
import http.server
import os
import pathlib
import re
import shutil
import tempfile
import threading
import time

import pytest

from book_build import BUILD, HTML, built_book, record, skip_or_fail  # noqa: F401 (fixture)

# Console errors that are not the book's: the theme declares THEBE_JS_URL twice (harmless), and
# Chromium asks the test server for /favicon.ico, which a book opened from disk never requests.
ALLOWED_CONSOLE_ERRORS = ("THEBE_JS_URL", "/favicon.ico - Failed to load resource")
PAGE_TIMEOUT_S = 60
MATHJAX_START_S = 15  # after the page loaded, MathJax's own script must have started by then
MATHJAX_TIMEOUT_S = 90  # ... and finished typesetting the page by then
SCREENSHOTS = BUILD / "screenshots"
INSTALL_HINT = ("install Debian's `chromium` and `chromium-driver` (as root: `apt-get install -y "
                "chromium chromium-driver`; `bash scripts/test.sh` does it when it runs as root) and "
                "selenium (`pip install -r requirements.txt`), or point CHROMIUM_BIN and CHROMEDRIVER "
                "at a Chromium and its driver")


def pages() -> list[str]:
    """Every HTML page of the build, relative to _build/html (theme assets excluded)."""
    if not HTML.exists():
        return []
    skip = {"_static", "_sources", "_images"}
    return sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
                  if not skip & set(p.relative_to(HTML).parts))


def find_browser():
    chromium = os.environ.get("CHROMIUM_BIN") or next(
        (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
         if shutil.which(name)), None)
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    missing = [what for what, path in (("chromium", chromium), ("chromedriver", driver)) if not path]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (Python)")
    return chromium, driver, missing


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(built_book):
    """_build/html served on 127.0.0.1 (a free port) from a daemon thread, for this module only."""
    handler = functools.partial(QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser(built_book):
    chromium, driver_path, missing = find_browser()
    if missing:
        skip_or_fail(f"browser test of the built book NOT RUN: missing {', '.join(missing)}; "
                     + INSTALL_HINT)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="book-browser-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", "--no-first-run", "--disable-extensions",
                 # no network: every name fails to resolve, any other address goes to a dead proxy
                 # (127.0.0.1 itself is never proxied, so the local server stays reachable)
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--proxy-server=127.0.0.1:9",
                 "--window-size=1280,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(PAGE_TIMEOUT_S)
    driver.set_script_timeout(MATHJAX_TIMEOUT_S)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


# Runs in the page: wait until MathJax finished its first typeset, then report on the math.
MATH_REPORT = r"""
const done = arguments[arguments.length - 1];
const deadline = Date.now() + arguments[0] * 1000;
function report(status) {
  const marked = Array.from(document.querySelectorAll('.math'));
  const untypeset = marked.filter(e => !e.querySelector('mjx-container'))
                          .map(e => e.textContent.trim().slice(0, 80));
  const errors = Array.from(document.querySelectorAll('mjx-merror'))
                      .map(e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 80));
  // The text a reader reads: the whole page (sidebars included) without code, scripts and typeset formulas.
  const clone = (document.body || document.documentElement).cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, mjx-container, mjx-assistive-mml, .highlight')
       .forEach(e => e.remove());
  const text = clone.textContent;
  const raw = [];
  for (const delim of ['\\(', '\\[', '$$', '\\begin{']) {
    let at = text.indexOf(delim);
    if (at >= 0) raw.push(JSON.stringify(text.slice(Math.max(0, at - 30), at + 50)));
  }
  done({status: status, marked: marked.length,
        containers: document.querySelectorAll('mjx-container').length,
        untypeset: untypeset, errors: errors, raw: raw,
        version: (window.MathJax && window.MathJax.version) || null});
}
const hasMath = document.querySelectorAll('.math').length > 0;
const loadsMathJax = Array.from(document.scripts).some(e => /mathjax/i.test(e.src || ''));
(function wait() {
  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
    window.MathJax.startup.promise.then(() => report('typeset'), e => report('failed: ' + e));
  } else if (!hasMath && !loadsMathJax) {
    report('no math on this page');
  } else if (Date.now() > deadline) {
    report('MathJax never started (its script did not load?)');
  } else {
    setTimeout(wait, 100);
  }
})();
"""

IMAGES_REPORT = r"""
return Array.from(document.images).map(img => ({src: img.getAttribute('src'),
  complete: img.complete, width: img.naturalWidth}));
"""

# The notebook cells' code and output blocks wider than the column they sit in (a reader would scroll them
# sideways): each one's longest line.
WIDE_BLOCKS = r"""
return Array.from(document.querySelectorAll('div.cell pre'))
  .filter(p => p.scrollWidth > p.clientWidth + 1)
  .map(p => p.textContent.split('\n').reduce((a, b) => a.length >= b.length ? a : b, '').slice(0, 100));
"""

# For each dropdown admonition: is its body hidden before, and visible after a click on its title?
DROPDOWNS = "return Array.from(document.querySelectorAll('.admonition.dropdown'));"
BODY_VISIBLE = r"""
const box = arguments[0];
const body = Array.from(box.children).filter(e => !e.classList.contains('admonition-title'));
return body.length > 0 && body.some(e => e.offsetHeight > 0 && getComputedStyle(e).display !== 'none'
                                         && getComputedStyle(e).visibility !== 'hidden');
"""


def full_page_screenshot(driver, path: pathlib.Path):
    """The whole page as a reader scrolls it, laid out in a window as tall as the page."""
    height = driver.execute_script(
        "return Math.min(16000, Math.max(document.body.scrollHeight, "
        "document.documentElement.scrollHeight));")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": False})
    try:
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    path.write_bytes(base64.b64decode(shot["data"]))


def wait_until(predicate, timeout=5.0):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


# With no build there are no pages: one placeholder lets the fixtures skip (or fail in CI) loudly.
@pytest.mark.parametrize("page", pages() or ["(no built book)"])
def test_page_in_offline_browser(server, browser, page):
    problems = []
    browser.get_log("browser")  # drop what earlier pages left
    url = f"{server}/{page}"
    browser.get(url)
    if re.search(r'http-equiv="refresh"', (HTML / page).read_text(), re.IGNORECASE):
        # A redirect page (the book's index.html): check where it lands instead.
        assert wait_until(lambda: browser.current_url != url and browser.execute_script(
            "return document.readyState") == "complete", timeout=15), f"{page}: redirect did not happen"
        page_landed = browser.current_url[len(server) + 1:]
        assert (HTML / page_landed.split("#")[0]).exists(), f"{page} redirects to a missing page"

    math = browser.execute_async_script(MATH_REPORT, MATHJAX_START_S)
    if math["marked"] and math["status"] != "typeset":
        problems.append(f"MathJax: {math['status']}")
    if math["untypeset"]:
        problems.append(f"{len(math['untypeset'])} of {math['marked']} formulas not typeset, "
                        f"e.g. {math['untypeset'][:3]}")
    if math["errors"]:
        problems.append(f"MathJax TeX errors: {math['errors'][:5]}")
    if math["raw"]:
        problems.append(f"raw TeX left in the text: {math['raw']}")

    images = browser.execute_script(IMAGES_REPORT)
    broken = [img["src"] for img in images if not (img["complete"] and img["width"] > 0)]
    if broken:
        problems.append(f"{len(broken)} of {len(images)} images did not load: {broken[:5]}")

    wide = browser.execute_script(WIDE_BLOCKS)
    if wide:
        problems.append(f"{len(wide)} code or output blocks scroll sideways at 1280 px, e.g. {wide[:2]}")

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    full_page_screenshot(browser, SCREENSHOTS / (page.replace("/", "__")[:-len(".html")] + ".png"))

    dropdowns = browser.execute_script(DROPDOWNS)
    opened = 0
    for k, box in enumerate(dropdowns):
        label = box.find_element("css selector", ".admonition-title").text.strip()[:60] or f"dropdown {k}"
        if browser.execute_script(BODY_VISIBLE, box):
            problems.append(f"dropdown {label!r} is open before any click")
            continue
        # The reader's control is the toggle button the theme puts in the title (the title's text
        # may hold a link, to the exercise, which navigates instead of toggling).
        buttons = box.find_elements("css selector", ".admonition-title .toggle-button")
        if not buttons:
            problems.append(f"dropdown {label!r} has no toggle button")
            continue
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", buttons[0])
        buttons[0].click()
        if wait_until(lambda: browser.execute_script(BODY_VISIBLE, box)):
            opened += 1
        else:
            problems.append(f"dropdown {label!r} did not open when its title was clicked")

    errors = [entry["message"] for entry in browser.get_log("browser")
              if entry["level"] == "SEVERE"
              and not any(allowed in entry["message"] for allowed in ALLOWED_CONSOLE_ERRORS)]
    if errors:
        problems.append(f"console errors: {errors[:5]}")

    record("browser", f"{page}: {math['containers']} formulas typeset of {math['marked']} marked, "
                      f"{len(images) - len(broken)}/{len(images)} images loaded, "
                      f"{opened}/{len(dropdowns)} dropdowns opened, MathJax {math['version']}")
    assert not problems, f"{page}:\n  " + "\n  ".join(problems)
