# recurd — build with make on Debian bookworm, run as an unprivileged user.
#   docker build -t recurd .
#   docker run --rm -p 8080:8080 -v recurd-state:/srv/recurd/state -e RECURD_API_KEY=change-me recurd
#   docker run ... recurd --workers 4 --max-sessions 50000     (flags are appended, see below)
# Only Debian packages are used (no other downloads). The binary is plain `make`'s: built for
# generic x86-64 (PORTABLE_OPT; the build `make test-isa` tests and `make bench` measures), so the
# image runs on any host, with the hot code compiled once per kernel path (AVX-512, AVX2,
# baseline) and chosen at start from the CPU (docs/DESIGN.md §4.1).

FROM debian:bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential pkg-config \
      libuv1-dev libcjson-dev libopenblas-dev node-llhttp libpcre2-dev libutf8proc-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
COPY core core
COPY proto proto
COPY server server
RUN make build/recurd

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libuv1 libcjson1 libopenblas0-pthread libpcre2-8-0 libutf8proc2 curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /srv/recurd --shell /usr/sbin/nologin recurd \
 && mkdir -p /srv/recurd/state && chown recurd:recurd /srv/recurd/state && chmod 0700 /srv/recurd/state
COPY --from=build /src/build/recurd /usr/local/bin/recurd
COPY config /srv/recurd/config
COPY models /srv/recurd/models
WORKDIR /srv/recurd
USER recurd
# One BLAS thread per call: parallelism comes from recurd's workers (docs/DESIGN.md §12).
ENV OPENBLAS_NUM_THREADS=1
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
# The settings live in the ENTRYPOINT, not in CMD: flags appended with `docker run IMAGE --flag`
# replace CMD and add to them, so the container stays on 0.0.0.0:8080 with persistence on
# (config/docker.json: state_dir on the VOLUME below). 0.0.0.0 needs an API key
# (-e RECURD_API_KEY=...); without one recurd exits at start with refusing_insecure_bind
# (or pass --allow-insecure-bind on a trusted network). Check a command line without starting:
#   docker run --rm IMAGE --workers 4 --check-config
VOLUME ["/srv/recurd/state"]
ENTRYPOINT ["/usr/local/bin/recurd", "--config", "/srv/recurd/config/docker.json"]
CMD []
