#!/usr/bin/env bash
# Prints hostlet's version for make (VERSION): git describe of the nearest
# v* tag (v1.2.0 on the tag, v1.2.0-3-g<sha> three commits later), else
# v0.0.0-<commits>-g<sha> while the repository has no tag; -dirty when a
# tracked file has changed. Hashes are abbreviated to 12 hex digits: git's
# own length grows with the repository, which would rename the same
# commit's release. "dev" outside a git checkout (set VERSION instead).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
	echo dev
	exit 0
fi
if git describe --tags --match 'v[0-9]*' --abbrev=12 --dirty 2>/dev/null; then
	exit 0
fi
dirty=
git diff --quiet HEAD -- || dirty=-dirty
echo "v0.0.0-$(git rev-list --count HEAD)-g$(git rev-parse --short=12 HEAD)$dirty"
