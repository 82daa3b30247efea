"""``journal serve``: the local, read-only web viewer of a journal (DESIGN §15, docs/serve.md).

On Starlette served by uvicorn (the ``serve`` extra): ``app`` binds and runs the server with its
limits, ``gate`` is the middleware every request passes (host, method, headers, errors, the log
line), ``routes`` reads in worker threads and answers, ``pages`` renders HTML (every stored
string escaped: G14; a page of the log: ``log_page``), ``timeline`` reads a session's timeline
in one bounded pass and ``timeline_page`` draws it as SVG, ``forks`` reads its fork tree,
``api`` gives the command line's JSON documents (and the timeline's and the tree's), ``assets``
holds the one stylesheet and the one script, ``screenshot`` draws a page in headless Chromium. The library
never imports this package.
"""

from journal.serve.app import Limits, Viewer, run

__all__ = ["Limits", "Viewer", "run"]
