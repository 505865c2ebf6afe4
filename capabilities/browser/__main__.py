"""`python -m capabilities.browser`: the browser capability server on stdio."""

from capabilities.stdio import serve

from .server import build_server

if __name__ == "__main__":
    serve(build_server().run)
