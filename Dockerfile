# syntax=docker/dockerfile:1
# The one Hermes binary, static, in a minimal non-root image. Every target runs from it:
#   docker run --rm -p 7070:7070 hermes:dev                                   # monolithic
#   docker run --rm hermes:dev serve --target=session --redis-url=redis://… # one service
#
#   docker build -t hermes:dev --build-arg VERSION=$(git describe --tags --always --dirty) .

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
ENV GOTOOLCHAIN=local CGO_ENABLED=0
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/hermes ./cmd/hermes \
 && mkdir -p /out/data

# distroless static: CA certificates, /etc/passwd with nonroot (65532), no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/hermes /hermes
# The data directory of monolithic mode, owned by the user that writes it.
COPY --from=build --chown=65532:65532 /out/data /var/lib/hermes
USER 65532:65532
# gRPC (HERMES_LISTEN); Prometheus /metrics when HERMES_METRICS_LISTEN=0.0.0.0:9090.
EXPOSE 7070 9090
# The image listens on every interface; the binary's own default is 127.0.0.1:7070.
ENV HERMES_LISTEN=0.0.0.0:7070 \
    HERMES_DATA_DIR=/var/lib/hermes
VOLUME ["/var/lib/hermes"]
ENTRYPOINT ["/hermes"]
CMD ["serve"]
