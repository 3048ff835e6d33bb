# syntax=docker/dockerfile:1
# The venturi worker image: build a wheel in one stage, install only it (and its runtime
# dependencies) in a slim final stage that runs as an unprivileged user.
#
#   docker build -t venturi .
#   docker run --rm -e VENTURI_DSN=postgresql://... venturi                  # the example worker
#   docker run --rm -e VENTURI_DSN=... venturi worker --app myproject.tasks  # your own tasks
#
# Configuration comes from the environment at run time (VENTURI_DSN, VENTURI_PREFIX):
# nothing secret is baked into the image.

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN pip install "build>=1.2"
COPY pyproject.toml README.md ./
COPY venturi ./venturi
COPY cli ./cli
COPY sql ./sql
RUN python -m build --wheel --outdir /dist


FROM python:${PYTHON_VERSION}-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 venturi \
    && useradd --system --uid 10001 --gid venturi --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin venturi
# The wheel only: no build tools, tests or dev extras reach this stage. With the web
# extra: the worker's --http (probes, metrics, --dashboard) is served by uvicorn.
COPY --from=builder /dist/ /tmp/dist/
RUN set -- /tmp/dist/*.whl && pip install "${1}[web]" && rm -rf /tmp/dist
USER venturi:venturi
WORKDIR /app
EXPOSE 9090
STOPSIGNAL SIGTERM
# slim has no curl: probe /healthz with the interpreter that is already there.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9090/healthz', timeout=3).status == 200 else 1)"]
ENTRYPOINT ["venturi"]
CMD ["worker", "--app", "venturi.examples", "--concurrency", "8", "--grace", "25s", "--http", "0.0.0.0:9090"]
