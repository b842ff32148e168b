"""ocrstream: event-driven OCR of scanned documents on Apache Kafka."""

__version__ = "0.1.0"
