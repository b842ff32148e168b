"""ocrstream.streams"""
