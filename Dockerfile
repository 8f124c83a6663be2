# warmd's image for Docker and buildah users:
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=$(git describe --tags --always) -t REG/warmd:TAG .
# The tested build is `make image` (hack/imagebuild, no container engine): this file makes the same
# binary (cgo, -trimpath, stripped) on a distroless glibc base, cross-compiling on the build
# platform with Debian's cross gcc instead of emulating the target.
ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETARCH
ARG VERSION=dev
RUN set -eu; \
    case "$TARGETARCH" in amd64) triple=x86_64-linux-gnu ;; arm64) triple=aarch64-linux-gnu ;; \
      *) echo "unsupported TARGETARCH $TARGETARCH" >&2; exit 1 ;; esac; \
    if [ "$(dpkg --print-architecture)" != "$TARGETARCH" ]; then \
      apt-get update -q && apt-get install -y -q --no-install-recommends "gcc-$(echo $triple | tr _ -)" "libc6-dev-$TARGETARCH-cross"; \
      echo "$triple-gcc" >/cc; else echo gcc >/cc; fi
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
# go-nvml's header marks wrapped functions deprecated: silence that warning class for the cgo packages.
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 GOOS=linux GOARCH=$TARGETARCH CC=$(cat /cc) CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
    go build -buildvcs=false -trimpath -ldflags "-s -w -X warmd.io/warmd/pkg/version.Version=$VERSION" \
      -o /out/warmd ./cmd/warmd

# glibc, CA certificates, root and nonroot (65532) users; runs as nonroot unless the pod says otherwise
# (the DaemonSet runs as root, the extender as 65532).
FROM gcr.io/distroless/base-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="warmd" \
      org.opencontainers.image.source="https://github.com/warmd/warmd" \
      org.opencontainers.image.version="$VERSION"
COPY --from=build /out/warmd /usr/local/bin/warmd
ENTRYPOINT ["/usr/local/bin/warmd"]
