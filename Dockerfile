# memory-core workers, beat and Flower (compose.yaml). The image runs as an unprivileged user.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    MEMORY_CORE_VAR_DIR=/data/var

WORKDIR /app
COPY pyproject.toml README.md beat_schedule.py ./
COPY memory_core ./memory_core
COPY workers ./workers
RUN pip install --no-cache-dir ".[postgres]" \
    && useradd --create-home --uid 1000 memory \
    && mkdir -p /data/var \
    && chown -R memory:memory /data

USER memory
VOLUME ["/data"]
EXPOSE 5555
CMD ["memory-core", "worker"]
