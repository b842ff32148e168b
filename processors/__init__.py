"""ocrstream.processors"""
