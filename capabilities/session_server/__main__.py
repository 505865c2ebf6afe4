"""`python -m capabilities.session_server`: the session capability server on stdio."""

from capabilities.stdio import serve

from .server import main

if __name__ == "__main__":
    serve(main)
