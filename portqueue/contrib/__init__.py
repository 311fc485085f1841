"""Integrations with frameworks; each lives in its own subpackage and needs its extra
(``portqueue[django]`` for :mod:`portqueue.contrib.django`)."""
