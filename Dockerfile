# syntax=docker/dockerfile:1
# progressdb server image: a static binary on distroless, run as a non-root
# user, with the database (and its audit folder) on the /data volume.
#
#   docker build -t progressdb --build-arg VERSION=$(git describe --tags --always) \
#                --build-arg COMMIT=$(git rev-parse --short=12 HEAD) .
#   docker run -p 8080:8080 -v progressdb-data:/data progressdb
#
# See docs/deploy.md.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
# Pure Go: the binary is static and needs no libc in the final image.
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/progressdb/progressdb/server/internal/buildinfo.version=${VERSION} -X github.com/progressdb/progressdb/server/internal/buildinfo.commit=${COMMIT}" \
      -o /out/progressdb ./server/cmd/progressdb \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/progressdb /usr/local/bin/progressdb
# An empty /data owned by the runtime user, so that a new named volume
# starts writable by it.
COPY --from=build --chown=65532:65532 /out/data /data
ENV PROGRESSDB_DB_PATH=/data \
    PROGRESSDB_ADDR=0.0.0.0:8080 \
    PROGRESSDB_LOG_FORMAT=json
USER 65532:65532
VOLUME ["/data"]
EXPOSE 8080
# The image has no shell or HTTP client for a HEALTHCHECK: probe GET
# /healthz from outside (the Kubernetes manifests do).
ENTRYPOINT ["/usr/local/bin/progressdb"]
CMD ["serve"]
