#!/usr/bin/env bash
# Install headless Chromium and its driver (Debian packages `chromium`, `chromium-driver`) for the
# browser test of the built book (tests/book/test_book_browser.py), when this machine can: running
# as root with apt-get. Idempotent: does nothing when both are already there. Never fatal: without
# a browser the test is skipped with a message on a laptop, and fails under CI=true.
set -uo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: chromium/chromedriver missing and this is not root with apt-get: install Debian's" \
       "chromium and chromium-driver yourself, or the browser test is skipped (fails under CI=true)" >&2
  exit 0
fi
echo "== installing Debian chromium + chromium-driver for the browser test"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }; then
  echo "warning: apt-get could not install chromium chromium-driver; the browser test will be" \
       "skipped (or fail under CI=true)" >&2
fi
exit 0
