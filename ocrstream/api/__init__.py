"""The HTTP edge of the pipeline (``ocrstream api``): FastAPI on uvicorn.

Stateless: it produces ScanSubmitted and reads the result topics and the store; it never runs
OCR. Several replicas can run behind a load balancer (docs/architecture.md "HTTP API")."""
