"""ocrstream.services"""
