"""``journal serve``: the local, read-only web viewer of a journal (DESIGN §15, docs/serve.md).

Built on the standard library alone (``http.server``): ``app`` serves, ``pages`` renders HTML
(every stored string escaped: G14), ``api`` gives the command line's JSON documents, ``assets``
holds the one stylesheet and the one script, ``screenshot`` draws a page in headless Chromium.
The library never imports this package.
"""

from journal.serve.app import Viewer, run

__all__ = ["Viewer", "run"]
