# syntax=docker/dockerfile:1
# The one Hermes binary, static, in a minimal image that runs as a non-root user. The only path
# that user owns is the data volume's mount point; run with --read-only and nothing else is
# writable (the base image's /tmp included). It listens on every interface, which the binary
# allows only with API keys (or client certificates), so it runs as README.md "The container
# image" says (cmd/hermes TestContainerStartsAsDocumented runs those commands' settings):
#   docker run --rm --read-only -p 127.0.0.1:7070:7070 -v hermes-data:/var/lib/hermes \
#     -v "$PWD/auth.yaml:/etc/hermes/auth.yaml:ro" -e HERMES_AUTH_FILE=/etc/hermes/auth.yaml hermes:dev
#                                                          # monolithic, API keys from auth.yaml
#   docker run --rm --read-only --network host -e HERMES_LISTEN=127.0.0.1:7070 \
#     -v hermes-data:/var/lib/hermes hermes:dev           # no keys: loopback of the host only
#
#   docker build -t hermes:dev --build-arg VERSION=$(git describe --tags --always --dirty) .
#
# In Kubernetes (deploy/k8s) the pods run it with a read-only root file system, as user and group
# 65532, with emptyDirs at /tmp and /var/lib/hermes.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
ENV GOTOOLCHAIN=local CGO_ENABLED=0
COPY go.mod go.sum ./
# bbolt, patched (third_party/bbolt/JOURNAL.md): go.mod replaces it with this directory.
COPY third_party ./third_party
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/hermes ./cmd/hermes \
 && mkdir -p /out/data

# distroless static: CA certificates, /etc/passwd with nonroot (65532), no shell, no package
# manager.
FROM gcr.io/distroless/static-debian12:nonroot
# Owned by root and not writable: the running user cannot replace the binary.
COPY --from=build --chown=0:0 --chmod=0555 /out/hermes /hermes
# The data directory of monolithic mode is the one path the user owns, and only as the mount
# point of a volume: VOLUME makes docker mount one there (an anonymous one when none is given),
# which it initialises with this owner, so the embedded stores never write into the image's
# layers. Run with --read-only (and --tmpfs /tmp if anything needs scratch space) to keep it so.
COPY --from=build --chown=65532:65532 --chmod=0700 /out/data /var/lib/hermes
USER 65532:65532
# gRPC (HERMES_LISTEN); Prometheus /metrics when HERMES_METRICS_LISTEN=0.0.0.0:9090; plaintext
# /readyz and /livez when HERMES_HEALTH_LISTEN=0.0.0.0:8081.
EXPOSE 7070 8081 9090
# The image listens on every interface; the binary's own default is 127.0.0.1:7070. A
# non-loopback listener needs API keys (HERMES_AUTH_FILE) or mutual TLS, see deploy/k8s.
ENV HERMES_LISTEN=0.0.0.0:7070 \
    HERMES_DATA_DIR=/var/lib/hermes
VOLUME ["/var/lib/hermes"]
ENTRYPOINT ["/hermes"]
CMD ["serve"]
