"""ocrstream.schemas"""
