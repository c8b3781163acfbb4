# syntax=docker/dockerfile:1
# binlog-outbox: a static binary on a distroless base, run as a non-root user.
#
#   docker build -t binlog-outbox --build-arg VERSION=$(git describe --tags --always) .
#   docker run --rm binlog-outbox --help
#
# Configure it with the BINLOG_OUTBOX_* environment variables (see
# `binlog-outbox run --help` and docker-compose.yml).

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Dependencies first: this layer is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
# CGO_ENABLED=0: a static binary that needs no libc in the final image.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/binlog-outbox ./cmd/binlog-outbox

# distroless/static: CA certificates (for rediss:// and MySQL TLS), tzdata,
# /etc/passwd with the nonroot user, and nothing else: no shell, no package
# manager. About 2 MB plus the binary.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/binlog-outbox /usr/local/bin/binlog-outbox
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/binlog-outbox"]
CMD ["run"]
