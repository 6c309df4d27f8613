# syntax=docker/dockerfile:1

# The elector image: one static binary on distroless/static (which carries the
# CA certificates that --redis-tls needs, /etc/passwd and tzdata), running as
# the distroless "nonroot" user.
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse HEAD) \
#     --build-arg DATE=$(git log -1 --format=%cI) -t elector:v1.2.3 .
#
# The compile step is hack/build.sh, the same command line as `make build`, so
# that CI, which has no Docker engine, builds and checks what this image ships.

# Both base images are pinned by digest (the multi-platform index the tag pointed
# to), so a rebuild gets the same bases until someone moves them on purpose:
#
#   (cd hack/image && go run ./pin ../../Dockerfile)   # re-resolve each tag, rewrite the digests
#
# then rebuild and commit the Dockerfile. hack/image's tests refuse a FROM without a digest.

# Build on the builder's own platform and cross-compile (CGO is off), which is
# much faster than emulating the target platform.
FROM --platform=$BUILDPLATFORM golang:1.26.8@sha256:2dbae744204892730b7032501f5973360ce57cfe118a194b338a97b5aa2d40cc AS build
WORKDIR /src
# Dependencies first: this layer stays cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS TARGETARCH TARGETVARIANT
# The build context has no .git (see .dockerignore): pass these to stamp the
# binary; unset ones are left to the Go toolchain's build info.
ARG VERSION COMMIT DATE
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    TARGETOS=$TARGETOS TARGETARCH=$TARGETARCH TARGETVARIANT=$TARGETVARIANT \
    VERSION=$VERSION COMMIT=$COMMIT DATE=$DATE \
    hack/build.sh /out/elector \
 && hack/check-static.sh /out/elector

FROM gcr.io/distroless/static:nonroot@sha256:e2e927ec666bae08560abb3c55d0659eceabb657f56b6782ab500a9fc7f555e3
COPY --from=build /out/elector /elector
# 65532 is distroless's "nonroot"; numeric so that runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["/elector"]
