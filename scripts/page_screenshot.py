"""Screenshot the simulator section of a running page for the README.

    depthlab serve --port 8765 &
    python scripts/page_screenshot.py http://127.0.0.1:8765 docs/img/simulator.png

Uses Debian's Chromium through Playwright (as the browser tests do).
"""

from __future__ import annotations

import sys

from playwright.sync_api import sync_playwright

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def main() -> int:
    base, out = sys.argv[1], sys.argv[2]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900}, locale="en-US")
        page.goto(base + "/#lang=en&mode=gradient&n=32&g=1.00&res=1&pre=1&wb=1")
        page.wait_for_timeout(3000)
        # the sticky header would otherwise sit on top of an element screenshot
        page.evaluate("for (const h of document.querySelectorAll('header')) h.style.position = 'static'")
        page.locator("#simulator").screenshot(path=out)
        browser.close()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
