# The ocrstream agents: `docker run ocrstream:0.1.0 splitter|ocr-worker|assembler|lag-exporter`.
# `make image` builds it (docker build -t ocrstream:0.1.0 .). CPU inference (onnxruntime and
# OpenVINO, the core dependencies: `auto` measures which is faster per stage on the node's CPU,
# and keeps the choice in the engine cache); the OCR worker on NVIDIA GPUs has its own image:
# Dockerfile.gpu.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# OpenCV (headless) and onnxruntime need glib and OpenMP at run time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libglib2.0-0 libgomp1 \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 10001 ocrstream
WORKDIR /app

COPY pyproject.toml README.md constraints.txt ./
COPY ocrstream ./ocrstream
# ocrstream/streams … link to these (the design card's layout; see the README)
COPY streams ./streams
COPY processors ./processors
COPY schemas ./schemas
COPY storage ./storage
RUN pip install -c constraints.txt .

USER ocrstream
# Metrics: splitter 9101, assembler 9102, lag-exporter 9103, ocr-worker 9110.
EXPOSE 9101 9102 9103 9110
ENTRYPOINT ["ocrstream"]
CMD ["--help"]
