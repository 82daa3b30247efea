"""``journal serve``: the local, read-only web viewer of a journal (DESIGN §15, docs/serve.md).

On Starlette served by uvicorn (the ``serve`` extra): ``app`` binds and runs the server with its
limits, ``gate`` is the middleware every request passes (host, method, headers, errors, the log
line), ``routes`` reads in worker threads and answers, ``pages`` renders HTML (every stored
string escaped: G14), ``api`` gives the command line's JSON documents, ``assets`` holds the one
stylesheet and the one script, ``screenshot`` draws a page in headless Chromium. The library
never imports this package.
"""

from journal.serve.app import Limits, Viewer, run

__all__ = ["Limits", "Viewer", "run"]
