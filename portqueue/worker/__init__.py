"""Consuming: the worker that claims and runs jobs, and what handlers receive.

``runtime.Worker`` is the asyncio worker both clients run (``host`` says
where its loop runs); ``job`` is what a handler gets; ``outcomes`` turns a
handler's return or exception into the fenced write that settles the attempt.
"""
