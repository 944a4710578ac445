#!/usr/bin/env bash
# README.md from nbs/index.ipynb: `nbdev_readme` where Quarto is installed, else nbconvert's Markdown export.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v quarto >/dev/null; then .venv/bin/nbdev_readme
else .venv/bin/jupyter nbconvert --log-level WARN --to markdown --output-dir . --output README nbs/index.ipynb
fi
