"""ocrstream.storage"""
