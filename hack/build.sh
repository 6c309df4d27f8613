#!/usr/bin/env bash
# Builds the elector binary: static (CGO_ENABLED=0), trimmed, stamped with its
# version. This is the one build command line of the project: the Dockerfile
# RUNs it and `make build` calls it, so CI exercises what the image ships.
#
# Usage: hack/build.sh [OUT]
#
#   OUT       output path (default: $OUT, else bin/elector), relative to the
#             current directory
#
# Environment (all optional):
#   VERSION   release version, e.g. v1.2.3   (default: git describe)
#   COMMIT    VCS revision                   (default: git rev-parse HEAD)
#   DATE      build date, RFC 3339 UTC       (default: the commit's date, so
#             that two builds of one commit are identical; else SOURCE_DATE_EPOCH)
#   TARGETOS, TARGETARCH, TARGETVARIANT   target platform as set by
#             `docker buildx`; they win over GOOS, GOARCH, GOARM, which
#             default to the host's
#   PKG       package to build (default: ./cmd/elector)
#
# A value that is neither given nor known (no git checkout, as in a Docker
# build context) is not stamped; the binary then falls back to what the Go
# toolchain recorded (see cmd/elector/internal/version).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-${OUT:-bin/elector}}
case "$out" in
/*) ;;
*) out="$PWD/$out" ;;
esac
pkg=${PKG:-./cmd/elector}

in_git() { git -C "$repo_root" rev-parse --is-inside-work-tree >/dev/null 2>&1; }

version=${VERSION:-}
commit=${COMMIT:-}
date=${DATE:-}
if in_git; then
	[[ -n "$version" ]] || version=$(git -C "$repo_root" describe --tags --always --dirty 2>/dev/null || true)
	[[ -n "$commit" ]] || commit=$(git -C "$repo_root" rev-parse HEAD 2>/dev/null || true)
	[[ -n "$date" ]] || date=$(TZ=UTC git -C "$repo_root" log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null || true)
fi
if [[ -z "$date" && -n "${SOURCE_DATE_EPOCH:-}" ]]; then
	date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
fi

version_pkg=github.com/elector/elector/cmd/elector/internal/version
ldflags="-s -w"
[[ -z "$version" ]] || ldflags+=" -X $version_pkg.Version=$version"
[[ -z "$commit" ]] || ldflags+=" -X $version_pkg.Commit=$commit"
[[ -z "$date" ]] || ldflags+=" -X $version_pkg.Date=$date"

goos=${TARGETOS:-${GOOS:-$(go env GOOS)}}
goarch=${TARGETARCH:-${GOARCH:-$(go env GOARCH)}}
# buildx says linux/arm/v7 as TARGETARCH=arm TARGETVARIANT=v7.
if [[ "$goarch" == arm && -n "${TARGETVARIANT:-}" ]]; then
	export GOARM=${TARGETVARIANT#v}
fi

cd "$repo_root"
set -x
CGO_ENABLED=0 GOOS="$goos" GOARCH="$goarch" \
	go build -trimpath -ldflags "$ldflags" -o "$out" "$pkg"
