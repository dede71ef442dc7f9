"""Screenshot the lesson page: the simulator section for the README, or whole pages to
look at the layout in both languages on a wide and a phone-sized screen.

    depthlab serve --port 8765 &
    python scripts/page_screenshot.py http://127.0.0.1:8765 docs/img/simulator.png
    python scripts/page_screenshot.py http://127.0.0.1:8765 /tmp/page.png --lang zh --width 390 --full
    python scripts/page_screenshot.py http://127.0.0.1:8765 docs/img/realmodel.png --section realmodel \
        --state "rrun=smollm2&rp=paris" --max-height 1250

Uses Debian's Chromium through Playwright (as the browser tests do). The README's image is
the first form: 1100 px wide, English, N = 32, g = 1, all three switches on.
"""

from __future__ import annotations

import argparse
import sys

from playwright.sync_api import sync_playwright

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
README_STATE = "mode=gradient&n=32&g=1.00&residual=scaled&norm=rmsnorm"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="the page's address, e.g. http://127.0.0.1:8765 or file:///.../index.html")
    ap.add_argument("out", help="the PNG to write")
    ap.add_argument("--lang", choices=("en", "zh"), default="en")
    ap.add_argument("--width", type=int, default=1100, help="viewport width in px (default 1100)")
    ap.add_argument("--full", action="store_true", help="the whole page, not only the simulator")
    ap.add_argument("--section", default="simulator",
                    help="the section to capture, by its id: simulator (default), project, realmodel, ...")
    ap.add_argument("--max-height", type=int, default=0,
                    help="capture at most this many px from the section's top (default: all of it)")
    ap.add_argument("--state", default=README_STATE,
                    help=f"the controls, as in the URL (default {README_STATE})")
    args = ap.parse_args(argv)
    base = args.base if args.base.endswith(".html") else args.base.rstrip("/") + "/"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": args.width, "height": 900}, locale="en-US")
        page.goto(f"{base}#lang={args.lang}" + (f"&{args.state}" if args.state else ""))
        page.wait_for_function("() => window.DL && DL.ready", timeout=30000)
        page.wait_for_function("() => document.getElementById('reading-sim').textContent !== ''",
                               timeout=30000)
        if args.section == "realmodel":  # a probe may be computed first (seconds on a real model)
            page.wait_for_function("() => DL.realmodel && !DL.realmodel.busy && (DL.realmodel.result()"
                                   " !== null || document.getElementById('rm-error').textContent !== '')",
                                   timeout=180000)
        page.wait_for_timeout(500)  # the last chart's paint
        errors = page.evaluate("() => DL.errors")
        if errors:
            print(f"page errors: {errors}", file=sys.stderr)
            return 1
        # the sticky header would otherwise sit on top of an element screenshot
        page.evaluate("for (const h of document.querySelectorAll('header')) h.style.position = 'static'")
        if args.full:
            page.screenshot(path=args.out, full_page=True)
        else:
            section = page.locator("#" + args.section)
            if args.max_height:
                page.set_viewport_size({"width": args.width, "height": args.max_height + 200})
                section.evaluate("(e) => e.scrollIntoView()")
                box = section.bounding_box()
                page.screenshot(path=args.out, clip={"x": box["x"], "y": box["y"], "width": box["width"],
                                                     "height": min(box["height"], args.max_height)})
            else:
                section.screenshot(path=args.out)
        browser.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
