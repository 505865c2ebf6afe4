"""`python -m capabilities.exec`: the exec capability server on stdio."""

from .server import main

if __name__ == "__main__":
    main()
