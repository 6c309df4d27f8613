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

ARG GO_VERSION=1.26

# Build on the builder's own platform and cross-compile (CGO is off), which is
# much faster than emulating the target platform.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
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

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/elector /elector
# 65532 is distroless's "nonroot"; numeric so that runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["/elector"]
