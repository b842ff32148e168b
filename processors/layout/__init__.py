"""Document structure (parse mode ``layout``): blocks in reading order, and their Markdown.

- :mod:`.blocks`: the frozen :class:`~.blocks.Block` and :class:`~.blocks.Cell` of a page, in
  the shape of document.json.
- :mod:`.model`: the layout detector (PP-PicoDet, CDLA classes) through the backend layer.
- :mod:`.structure`: detections and OCR lines to blocks: class mapping, line assignment,
  tables from line geometry, headers and footers, reading order across columns.
- :mod:`.markdown`: a document's blocks rendered as Markdown.

Everything but :mod:`.model` is pure: no model, no I/O.
"""
