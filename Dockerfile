# syntax=docker/dockerfile:1
# The one llm-operator image: `llmop operator | gateway | mcp | ...` (and `hf download` for
# the model-fetch init container). Build:  docker build -t ghcr.io/example/llm-operator:v0.1.0 .

# --- build: wheels for the package and every dependency -------------------------------------
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
# the versions the tests passed with (requirements/lock.txt, `make lock`), not the newest
COPY requirements/lock.txt requirements/
COPY src/ src/
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c requirements/lock.txt ".[image]"

# --- runtime: no compilers, no build context, non-root ---------------------------------------
FROM python:3.11.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    HF_HUB_DISABLE_TELEMETRY=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels "llm-operator[image]" \
 && python -m compileall -q /usr/local/lib/python3.11/site-packages \
 && useradd --uid 65532 --gid 0 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin llmop
# Writes go to /tmp only (an emptyDir in the shipped manifests): the root filesystem can be
# read-only, bytecode is precompiled above.
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["llmop"]
CMD ["--help"]
