# helix-es projector and memory service: `helix-es project` folds the Kafka event log into
# Redis/Postgres views, `helix-es serve` answers HTTP (the `service` extra).
# Built by docker-compose.yml (services `projector` and `server`); context = repo root.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY helix_es ./helix_es
COPY projectors ./projectors
COPY schemas ./schemas
RUN pip install '.[service]' \
 && useradd --system --uid 10001 --no-create-home helix \
 && rm -rf /src

USER helix
WORKDIR /tmp
CMD ["helix-es", "project", "--config", "/config/helix.yaml"]
