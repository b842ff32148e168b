"""ocrstream.bench"""
